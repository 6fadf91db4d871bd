"""Data without reference answers: the self-supervised methods train on it (verified accuracy is simply not
logged; a held-out set without answers logs agreement), and a method that scores against references is refused before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coreward.data.synthetic import demo_rephrasing, load_demo
from coreward.grpo.config import TrainConfig
from coreward.runtime.config import load_config
from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics


pytestmark = pytest.mark.usefixtures("one_torch_thread")

RULE = Path(__file__).resolve().parents[2] / "configs" / "demo" / "rule.yaml"


def unlabeled_file(tmp_path: Path) -> Path:
    """The four problems the memorized policy knows, as a user's file: `problem` and `uid`, no answer."""
    path = tmp_path / "unlabeled.jsonl"
    path.write_text("".join(json.dumps({"uid": r.id, "problem": r.question}) + "\n" for r in load_demo("train", 4)))
    return path


def settings(policy, data: Path, *extra: str) -> list[str]:
    return [
        f"model.name_or_path={policy}", f"data.train={data}", "data.columns.question=problem", "data.columns.id=uid",
        "data.eval_every=0", "grpo.num_generations=4", "grpo.per_device_train_batch_size=8",
        "grpo.max_completion_length=24", "torch_threads=1", *extra,
    ]


def train(overrides: list[str], run_dir: Path):
    from coreward.grpo.train import run_training

    run_training(load_config(TrainConfig, RULE, overrides), output_dir=str(run_dir), max_steps=2)
    return read_metrics(run_dir / "metrics.jsonl")


def test_self_supervised_rewards_train_without_references(memorized_policy, tmp_path):
    data = unlabeled_file(tmp_path)
    rewards = ["majority", "self_certainty", "entropy", "co_rewarding_2"]
    held_out = [f"data.eval={data}", "data.eval_every=1", "data.eval_n=2", "data.eval_columns.question=problem"]
    rows = train(settings(memorized_policy, data, "rewards=[{name: majority}, {name: self_certainty}, {name: entropy}, "
                          "{name: co_rewarding_2}]", *held_out), tmp_path / "run")
    # the held-out set has no answers either: label-free agreement is logged (steps 0, 1, 2), never an accuracy
    assert [row["step"] for row in rows if "eval/agree@2" in row and "eval/answered" in row] == [0, 1, 2], rows
    assert not any(key.startswith(("eval/avg", "eval/maj", "eval/pass")) for row in rows for key in row)
    rows = [row for row in rows if row["step"] > 0]
    assert len(rows) == 2
    for row in rows:
        assert "verified_accuracy" not in row  # no references: nothing to verify against
        for name in rewards:
            assert any(key.startswith(f"rewards/{name}") for key in row), (name, sorted(row))
    assert (tmp_path / "run" / "final" / "config.json").is_file()


def test_co_rewarding_1_trains_without_references(memorized_policy, tmp_path):
    data = unlabeled_file(tmp_path)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"id": r.id, "rephrased": demo_rephrasing(r)}) + "\n"
                             for r in load_demo("train", 4)))
    rows = train(settings(memorized_policy, data, f"rewards=[{{name: co_rewarding_1, params: {{rephrasings: {pairs}}}}}]",
                          "grpo.per_device_train_batch_size=16"), tmp_path / "run")
    assert len(rows) == 2 and all("verified_accuracy" not in row for row in rows)


@pytest.mark.parametrize("reward", ["rule", "cooper", "model"])
def test_reference_based_rewards_are_refused_before_any_model_loads(reward, tmp_path):
    from coreward.grpo.train import run_training

    config = load_config(TrainConfig, RULE, settings(tmp_path / "no-such-model", unlabeled_file(tmp_path),
                                                     f"rewards=[{{name: {reward}}}]"))
    with pytest.raises(CorewardError, match=rf"reward '{reward}' scores completions against reference answers, and "
                                            rf".*unlabeled\.jsonl has none \(no 'answer' column"):
        run_training(config, output_dir=str(tmp_path / "run"), max_steps=1)
