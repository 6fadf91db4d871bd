"""One CPU process, the real demo policy, real GRPO steps: on an easy task the reward rises.

The easy task: reward 1 when the solution ends in the `#### r` answer format. The warm-started policy
writes that format about half of the time, so GRPO has signal from the first step and should shift the
policy toward it within a few steps.
"""

from __future__ import annotations

from pathlib import Path

from coreward.grpo.config import TrainConfig
from coreward.grpo.train import run_training
from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.runtime.config import load_config
from coreward.runtime.metrics import read_metrics


RULE_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo" / "rule.yaml"


@register("hash_format")
class HashFormatReward(RewardSource):
    def compute(self, batch: RolloutBatch) -> list[float]:
        return [1.0 if "####" in c else 0.0 for c in batch.completions]


def test_reward_rises_on_an_easy_task(tmp_path):
    config = load_config(TrainConfig, RULE_CONFIG, [
        "rewards.0.name=hash_format", "data.eval_every=0", "grpo.per_device_train_batch_size=64",
        "grpo.learning_rate=2e-4", "grpo.save_steps=100",
    ])
    run_training(config, output_dir=str(tmp_path / "run"), max_steps=10)
    rewards = [row["reward"] for row in read_metrics(tmp_path / "run" / "metrics.jsonl") if "reward" in row]
    assert len(rewards) == 10
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.1, rewards
