"""Self-certainty (Intuitor): reward confident token distributions.

For completion o with tokens t = 1..T and the policy's next-token distribution p_t over vocabulary V:

    r(o) = (1/T) Σ_t KL(U ‖ p_t) = (1/T) Σ_t [ -log|V| - (1/|V|) Σ_j log p_t(j) ]

computed from the policy's own logits in one no-grad pass (`grpo/token_stats.py`). No reference used.
With `temperature_scaled`, p_t = softmax(logits / τ), τ the sampling temperature (`grpo.temperature`), as
Intuitor's verl code computes it (verl-intuitor/verl/workers/actor/dp_actor.py); at τ = 1 both agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.rewards.memory import MemoryNeeds, PlannedRun


@register("self_certainty")
class SelfCertaintyReward(RewardSource):
    label = "Self-certainty"
    step_cost = 1.2
    table_order = 1

    @dataclass
    class Params:
        temperature_scaled: bool = False  # divide the logits by the sampling temperature first (Intuitor's verl code)

    @classmethod
    def memory_needs(cls, params, run: PlannedRun) -> MemoryNeeds:
        return MemoryNeeds([run.policy_logits_pass()])  # its statistic needs a no-grad pass of the policy

    @property
    def needs_token_stats(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self._stat,)

    @property
    def _stat(self) -> str:
        return "self_certainty_scaled" if self.params.temperature_scaled else "self_certainty"

    def compute(self, batch: RolloutBatch) -> list[float]:
        return list(batch.token_stats[self._stat])
