"""Entropy minimization: reward low-entropy completions.

    r(o) = -(1/T) Σ_t H(p_t),   H(p_t) = -Σ_j p_t(j) log p_t(j)

from the policy's own logits on its completion (`grpo/token_stats.py`). No reference used.
"""

from __future__ import annotations

from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.rewards.memory import MemoryNeeds, PlannedRun


@register("entropy")
class EntropyReward(RewardSource):
    label = "Entropy"
    step_cost = 1.25
    table_order = 2

    needs_token_stats = ("entropy",)

    @classmethod
    def memory_needs(cls, params, run: PlannedRun) -> MemoryNeeds:
        return MemoryNeeds([run.policy_logits_pass()])  # its statistic needs a no-grad pass of the policy

    def compute(self, batch: RolloutBatch) -> list[float]:
        return [-h for h in batch.token_stats["entropy"]]
