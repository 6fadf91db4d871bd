"""Before any model loads, a run checks the external parts its reward sources need (issue 38, fail fast): Cooper
with its assistant on an endpoint that is down, or that does not serve the named model, exits 2 with the URL and
the cause, instead of training as a static RM. Real HTTP: a local server, and a port nobody listens on."""

from __future__ import annotations

import socket
import time

from tests.helpers.llm_test_server import LLMTestServer
from tests.helpers.runs import REPO, coreward_here


COOPER = REPO / "configs" / "demo" / "cooper.yaml"


def closed_port() -> int:
    with socket.socket() as s:  # bound then released: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(tmp_path, assistant: str):
    return coreward_here("train", "--config", COOPER, "--output-dir", tmp_path / "run", "--max-steps", "1",
                         "--set", f"rewards.0.params.assistant={assistant}", "--set", "data.eval_every=0")


def test_an_assistant_endpoint_that_is_down_stops_the_run_before_training(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    start = time.monotonic()
    result = train(tmp_path, f"{url}#some-model")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"LLM endpoint {url} is not reachable" in result.stderr and "cooper" in result.stderr
    assert "ConnectError" in result.stderr  # the cause, not only that it failed
    assert time.monotonic() - start < 30 and not (tmp_path / "run").exists()  # no model loaded, no run left


def test_an_endpoint_without_the_named_model_stops_the_run(tmp_path):
    with LLMTestServer(models=("served-model",)) as server:
        result = train(tmp_path, f"{server.url}#other-model")
    assert result.returncode == 2
    assert "does not serve model 'other-model'" in result.stderr and "served-model" in result.stderr
