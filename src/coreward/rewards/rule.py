"""Rule-based reward (GT-GRPO): does the final answer verify equal to the reference?

    r_i = 1  if verify(gold, extract(o_i))  else 0

`extract` takes the last \\boxed{}, `#### x` or "the answer is x" (see `coreward.verify`);
equivalence is math-verify's, gold first, with a hard per-item deadline (a timeout is 0).
Precise but brittle: a correct answer in a format the extractor does not know scores 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from coreward.rewards.base import RewardSource, RolloutBatch, register


@register("rule")
class RuleReward(RewardSource):
    needs_references = True

    @dataclass
    class Params:
        correct: float = 1.0  # reward of a completion whose answer verifies equal to the reference
        incorrect: float = 0.0  # reward of any other completion (no answer, wrong answer, verifier timeout)

    def compute(self, batch: RolloutBatch) -> list[float]:
        batch.require_columns(self.name, "reference")
        return [self.params.correct if v.correct else self.params.incorrect for v in batch.verdicts()]
