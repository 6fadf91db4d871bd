"""Self-certainty (Intuitor): reward confident token distributions.

For completion o with tokens t = 1..T and the policy's next-token distribution p_t over vocabulary V:

    r(o) = (1/T) Σ_t KL(U ‖ p_t) = (1/T) Σ_t [ -log|V| - (1/|V|) Σ_j log p_t(j) ]

computed from the policy's own logits in one no-grad pass (`grpo/token_stats.py`). No reference used.
"""

from __future__ import annotations

from coreward.rewards.base import RewardSource, RolloutBatch, register


@register("self_certainty")
class SelfCertaintyReward(RewardSource):
    needs_token_stats = ("self_certainty",)

    def compute(self, batch: RolloutBatch) -> list[float]:
        return list(batch.token_stats["self_certainty"])
