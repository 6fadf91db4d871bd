"""`import coreward`: the documented entry points, loaded lazily (no torch at import), and the README's
notebook example run end to end on the tiny policy."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

import coreward


def test_import_is_light_and_names_resolve():
    code = "import coreward, sys; assert 'torch' not in sys.modules and 'trl' not in sys.modules, 'heavy import'"
    subprocess.run([sys.executable, "-c", code], check=True)
    for name in coreward.__all__:
        assert getattr(coreward, name) is not None
    with pytest.raises(AttributeError):
        coreward.no_such_name  # noqa: B018


def test_notebook_example(memorized_policy, tmp_path, one_torch_thread):
    # a user's source, registered from a notebook
    @coreward.register("test_api_length")
    class Brevity(coreward.RewardSource):
        @dataclass
        class Params:
            limit: int = 30  # completions up to this many characters score 1

        def compute(self, batch: coreward.RolloutBatch) -> list[float]:
            return [float(len(c) <= self.params.limit) for c in batch.completions]

    records = coreward.load_data("demo", limit=4)
    assert len(records) == 4 and records[0].answer
    result = coreward.train({
        "model": {"name_or_path": str(memorized_policy)},
        "data": {"train": "demo", "limit": 4, "prompt_format": "plain", "instruction": None},
        "rewards": [{"name": "test_api_length", "params": {"limit": 40}},
                    {"name": "tests.helpers.user_rewards:short_answers", "weight": 0.5}],
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 16},
        "torch_threads": 1,
    }, output_dir=str(tmp_path / "run"), max_steps=1, overrides=["seed=1"])
    assert result.global_step == 1 and (result.final_model / "config.json").is_file()
    rows = [line for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if line]
    assert "rewards/test_api_length" in rows[0] and "short_answers" in rows[0]
