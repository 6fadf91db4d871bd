"""Rule-based reward (GT-GRPO): does the final answer verify equal to the reference?

    r_i = 1  if verify(gold, extract(o_i))  else 0

`extract` takes the last \\boxed{}, `#### x` or "the answer is x" (see `coreward.verify`);
equivalence is math-verify's, gold first, with a hard per-item deadline (a timeout is 0).
Precise but brittle: a correct answer in a format the extractor does not know scores 0.
"""

from __future__ import annotations

from coreward.errors import CorewardError
from coreward.rewards.base import RewardSource, RolloutBatch, register


@register("rule")
class RuleReward(RewardSource):
    needs_references = True

    def __init__(self, correct: float = 1.0, incorrect: float = 0.0):
        self.correct = correct
        self.incorrect = incorrect

    def compute(self, batch: RolloutBatch) -> list[float]:
        verdicts = batch.verdicts()
        if verdicts is None:
            raise CorewardError(
                f"reward 'rule' needs reference answers, but the dataset column '{batch.reference_column}' "
                "is missing or empty"
            )
        return [self.correct if v.correct else self.incorrect for v in verdicts]
