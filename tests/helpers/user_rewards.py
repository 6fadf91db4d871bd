"""A user's own reward code, named from configs by import path (`tests.helpers.user_rewards:...`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from coreward.rewards.base import RewardSource, RolloutBatch


def short_answers(completions, **kwargs) -> list[float]:
    """A TRL-style reward function: 1 for completions under 40 characters."""
    return [1.0 if len(c) < 40 else 0.0 for c in completions]


class BatchRecorder(RewardSource):
    """A source that gives 0 to every completion and appends the global batch it saw (train batches only) to
    `<out>/rank<R>.jsonl`, one JSON line per step: what a test recomputes the other sources' rewards from. It asks
    for the token statistics the logit-based sources read, so it records the very ones they were given."""

    needs_token_stats = ("self_certainty", "entropy")

    @dataclass
    class Params:
        out: str = ""  # the directory the records go to

    def compute(self, batch: RolloutBatch) -> list[float]:
        if batch.mode == "train":
            rank = batch.policy.rank if batch.policy is not None else 0
            record = {"step": batch.step, "prompts": batch.prompts, "prompt_ids": batch.prompt_ids,
                      "completions": batch.completions, "completion_ids": batch.completion_ids,
                      "group_ids": batch.group_ids, "num_generations": batch.num_generations,
                      "reference_column": batch.reference_column, "columns": batch.columns,
                      "token_stats": batch.token_stats}
            out = Path(self.params.out)
            out.mkdir(parents=True, exist_ok=True)
            with open(out / f"rank{rank}.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
        return [0.0] * len(batch)


class SlowReward(RewardSource):
    """A source whose step takes three rule steps' time (`step_cost`): side-by-side runs of it start first."""

    step_cost = 3.0

    def compute(self, batch: RolloutBatch) -> list[float]:
        return [0.0] * len(batch)
