"""Asset names and model paths resolved in one place."""

from __future__ import annotations

import pytest

from coreward.runtime.assets import resolve_file, resolve_model, shipped_path
from coreward.runtime.errors import CorewardError


def test_demo_names_the_shipped_assets_of_each_kind():
    assert resolve_model("demo", "policy") == str(shipped_path("demo", "policy"))
    assert resolve_model("demo", "rm").endswith("demo_rm")  # shipped, or the rebuilt cache when registered
    assert resolve_file("demo", "rm_pairs", key="eval_data").name == "demo_rm_heldout_pairs.jsonl"


def test_directories_hub_ids_and_missing_paths(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    assert resolve_model(str(tmp_path)) == str(tmp_path)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)  # offline mode: a hub id is passed through to the cache
    assert resolve_model("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
    for missing in (str(tmp_path / "nope"), "./nope", "runs/x/final"):
        with pytest.raises(CorewardError, match="key model.name_or_path: no such directory"):
            resolve_model(missing, key="key model.name_or_path")
    with pytest.raises(CorewardError, match="eval_data: no such file"):
        resolve_file(tmp_path / "none.jsonl", "rm_pairs", key="eval_data")


def test_a_hub_id_fails_at_once_when_the_hub_is_unreachable_and_the_model_not_cached(tmp_path, monkeypatch):
    """No network: one clear line naming the model and what to do, in seconds (not transformers' retries)."""
    import socket
    import time

    import huggingface_hub.constants as hub

    with socket.socket() as closed:  # a local port nothing listens on: the connection is refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr(hub, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # restored after the test: the check turns offline mode on
    start = time.monotonic()
    with pytest.raises(CorewardError, match=r"model: 'someone/not-cached' is a Hugging Face hub id, the hub can't be reached"):
        resolve_model("someone/not-cached", key="model")
    assert time.monotonic() - start < 5
