"""transformers/TRL keys mean what they mean in coreward: grpo.save_total_limit is how many complete
checkpoints are kept, grpo.resume_from_checkpoint resumes from that path, and a key coreward must hold at
one value is refused, never dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from coreward.grpo.checkpoints import complete_checkpoints
from coreward.grpo.config import TrainConfig
from coreward.runtime.config import load_config
from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics


pytestmark = pytest.mark.usefixtures("one_torch_thread")

RULE = Path(__file__).resolve().parents[2] / "configs" / "demo" / "rule.yaml"


def settings(policy, *extra: str) -> list[str]:
    return [
        f"model.name_or_path={policy}", "data.limit=4", "data.eval_every=0", "grpo.num_generations=4",
        "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=16", "grpo.save_steps=1",
        "torch_threads=1", *extra,
    ]


def train(overrides: list[str], run_dir: Path, max_steps: int):
    from coreward.grpo.train import run_training

    return run_training(load_config(TrainConfig, RULE, overrides), output_dir=str(run_dir), max_steps=max_steps)


def steps(run_dir: Path) -> list[int]:
    return [int(p.name.rsplit("-", 1)[1]) for p in complete_checkpoints(run_dir)]


def test_save_total_limit_and_resume_from_checkpoint(memorized_policy, tmp_path):
    train(settings(memorized_policy, "grpo.save_total_limit=null"), tmp_path / "all", 3)
    assert steps(tmp_path / "all") == [1, 2, 3]  # null: every checkpoint, as in transformers
    train(settings(memorized_policy, "grpo.save_total_limit=1"), tmp_path / "one", 3)
    assert steps(tmp_path / "one") == [3]

    # another run directory, continuing from the first run's step 1: it trains steps 2 and 3 only
    start = tmp_path / "all" / "checkpoint-1"
    result = train(settings(memorized_policy, f"grpo.resume_from_checkpoint={start}"), tmp_path / "resumed", 3)
    assert result.global_step == 3
    assert [row["step"] for row in read_metrics(tmp_path / "resumed" / "metrics.jsonl")] == [2, 3]


@pytest.mark.parametrize(("override", "message"), [
    ("grpo.resume_from_checkpoint={tmp}", r"key grpo\.resume_from_checkpoint: .* is not a complete coreward checkpoint"),
    ("grpo.remove_unused_columns=true", r"key grpo\.remove_unused_columns: coreward needs False \(reward sources read"),
    ("grpo.save_total_limit=0", r"key grpo\.save_total_limit must be >= 1"),
    ("grpo.output_dir=x", r"key grpo\.output_dir: set it with output_dir"),
    ("grpo.push_to_hub=true", r"key grpo\.push_to_hub: set it with `coreward push RUN_DIR --repo \.\.\.` after training"),
])
def test_keys_coreward_cannot_honour_are_refused_before_any_model_loads(override, message, tmp_path):
    from coreward.grpo.train import run_training

    with pytest.raises(CorewardError, match=message):
        config = load_config(TrainConfig, RULE, settings(tmp_path / "no-such-model", override.format(tmp=tmp_path)))
        run_training(config, output_dir=str(tmp_path / "run"), max_steps=1)
