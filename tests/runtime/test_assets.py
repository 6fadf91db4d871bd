"""Asset names and model paths resolved in one place."""

from __future__ import annotations

import pytest

from coreward.runtime.assets import resolve_file, resolve_model, shipped_path
from coreward.runtime.errors import CorewardError


def test_demo_names_the_shipped_assets_of_each_kind():
    assert resolve_model("demo", "policy") == str(shipped_path("demo", "policy"))
    assert resolve_model("demo", "rm").endswith("demo_rm")  # shipped, or the rebuilt cache when registered
    assert resolve_file("demo", "rm_pairs", key="eval_data").name == "demo_rm_heldout_pairs.jsonl"


def test_directories_hub_ids_and_missing_paths(tmp_path):
    assert resolve_model(str(tmp_path)) == str(tmp_path)
    assert resolve_model("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"  # a hub id: passed through
    for missing in (str(tmp_path / "nope"), "./nope", "runs/x/final"):
        with pytest.raises(CorewardError, match="key model.name_or_path: no such directory"):
            resolve_model(missing, key="key model.name_or_path")
    with pytest.raises(CorewardError, match="eval_data: no such file"):
        resolve_file(tmp_path / "none.jsonl", "rm_pairs", key="eval_data")
