"""Before any model loads, a run checks the external parts its reward sources need (issue 38, fail fast): Cooper
with its assistant on an endpoint that is down, or that does not serve the named model, exits 2 with the URL and
the cause, instead of training as a static RM. Real HTTP: a local server, and a port nobody listens on."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

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


# --- model paths: each case breaks a real copy of the shipped demo models the way a user's folder gets broken
def demo_copy(tmp_path, kind: str, name: str):
    import shutil

    from coreward.runtime.assets import shipped_path

    return Path(shutil.copytree(shipped_path("demo", kind), tmp_path / name))


def as_run_directory(folder):
    """A run directory given instead of its final model: the model is one level down."""
    run = folder.parent / "a-run"
    run.mkdir()
    folder.rename(run / "final")
    return run


def cut_weights(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy that stopped half way
    return folder


def garbled_config(folder):
    (folder / "config.json").write_text('{"model_type": "qwen3", "hidden_size": ')
    return folder


def no_tokenizer(folder):
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)
    return folder


def no_weights(folder):
    (folder / "model.safetensors").unlink()
    return folder


@pytest.fixture
def no_weights_loaded(monkeypatch):
    """Loading any model's weights fails the test: the checks read configs, headers and tokenizers only."""
    import transformers

    def tripwire(*args, **kwargs):
        raise AssertionError("model weights were loaded before the bad model path was reported")

    # every model class's from_pretrained (TRL loads the policy by its config's architecture, not an Auto class)
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(tripwire))


RULE = REPO / "configs" / "demo" / "rule.yaml"
MODEL = REPO / "configs" / "demo" / "model.yaml"
MODEL_CASES = [  # (case, config, key set, model kind, how the folder is broken, what the error must say)
    ("policy: a run directory", RULE, "model.name_or_path", "policy", as_run_directory,
     r"key model\.name_or_path: \S*a-run is not a saved model \(no config\.json in it\); it holds the model folder\(s\) "
     r"final: did you mean \S*a-run/final\?"),
    ("policy: weights cut short", RULE, "model.name_or_path", "policy", cut_weights,
     r"key model\.name_or_path: the weights file \S*model\.safetensors is damaged \(.*incomplete metadata"),
    ("policy: config not JSON", RULE, "model.name_or_path", "policy", garbled_config,
     r"key model\.name_or_path: cannot read the model config of \S*folder: .*"),
    ("policy: no tokenizer", RULE, "model.name_or_path", "policy", no_tokenizer,
     r"key model\.name_or_path: cannot load a tokenizer from \S*folder: it has no vocabulary"),
    ("Cooper's RM: a policy", COOPER, "rewards.0.params.rm", "policy", lambda folder: folder,
     r"reward 'cooper': key rewards\.0\.params\.rm: \S*folder has 2 output labels, a VerifyRM has 1"),
    ("Cooper's RM: no weights", COOPER, "rewards.0.params.rm", "rm", no_weights,
     r"reward 'cooper': key rewards\.0\.params\.rm: \S*folder has a config\.json but no weights"),
    ("static RM: weights cut short", MODEL, "rewards.0.params.path", "rm", cut_weights,
     r"reward 'model': key rewards\.0\.params\.path: the weights file \S*model\.safetensors is damaged"),
    ("Cooper's assistant: a local model without weights", COOPER, "rewards.0.params.assistant", "policy", no_weights,
     r"reward 'cooper': key rewards\.0\.params\.assistant: \S*folder has a config\.json but no weights"),
]


@pytest.mark.parametrize("config, key, kind, breakage, message", [case[1:] for case in MODEL_CASES],
                         ids=[case[0] for case in MODEL_CASES])
def test_a_model_path_that_does_not_load_exits_2_before_training(config, key, kind, breakage, message, tmp_path,
                                                                  no_weights_loaded):
    import re

    from coreward.runtime.assets import shipped_path

    path = breakage(demo_copy(tmp_path, kind, "folder"))
    # the shipped RM by its folder, not by the name "demo": resolving that name loads the demo policy to check it
    shipped_rm = ["--set", f"rewards.0.params.rm={shipped_path('demo', 'rm')}"] if key.endswith("assistant") else []
    result = coreward_here("train", "--config", config, "--output-dir", tmp_path / "run", "--max-steps", "1",
                           "--set", f"{key}={path}", "--set", "data.eval_every=0", *shipped_rm)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(message, result.stderr), result.stderr
    assert not (tmp_path / "run").exists()


def test_the_shipped_models_pass_the_checks_unloaded(no_weights_loaded):
    """The checks read no weights, and refuse none of the models coreward ships (the positive control of the above).
    By folder: the name "demo" is resolved by loading the demo policy, which the tripwire would refuse."""
    from coreward.runtime.assets import shipped_path
    from coreward.runtime.model_files import check_model

    for kind in ("policy", "rm"):
        assert check_model(shipped_path("demo", kind), kind) == str(shipped_path("demo", kind))


def test_data_without_the_column_a_reward_scores_against_exits_2_naming_file_and_column(tmp_path):
    """The data has the columns the configured sources declare: a reference-based reward on a file with no answers."""
    import json

    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"question": f"{a}+1-1="}) + "\n" for a in range(20)))
    result = coreward_here("train", "--config", RULE, "--output-dir", tmp_path / "run", "--max-steps", "1",
                           "--set", f"data.train={data}", "--set", "data.eval_every=0")
    assert result.returncode == 2
    assert (f"reward 'rule' scores completions against reference answers, and {data} has none (no 'answer' column"
            in result.stderr), result.stderr
    assert not (tmp_path / "run").exists()
