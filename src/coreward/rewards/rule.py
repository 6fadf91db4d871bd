"""Rule-based reward (GT-GRPO): does the final answer verify equal to the reference?

    r_i = 1  if verify(gold, extract(o_i))  else 0                       match="verified" (default)
    r_i = 1  if last "#### <number>" of o_i, commas removed == gold      match="gsm8k_strict" (verl's GSM8K rule)

"verified": `extract` takes the last \\boxed{}, `#### x` or "the answer is x" (see `coreward.verify`); equivalence
is math-verify's, gold first, with a hard per-item deadline (a timeout is 0). Precise but brittle: a correct
answer in a format the extractor does not know scores 0.

"gsm8k_strict": the Cooper authors' GSM8K rule, verl's `utils/reward_score/gsm8k.py` (`method="strict"`): only a
literal `#### ` followed by digits, signs, dots and commas counts; string equality, so `#### 72.0` and
`\\boxed{72}` score 0 against 72. verl's GSM8K preprocessing asks for that format ('... output the final answer
after "####".') and stores the reference with its commas removed, as `gold` is compared here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from coreward.rewards.base import RewardSource, RolloutBatch, register


_GSM8K_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")  # verl's pattern, verbatim


def gsm8k_strict_answer(completion: str) -> str | None:
    """The last `#### <number>` of a completion, commas (and dollar signs) removed; None when there is none."""
    found = _GSM8K_STRICT.findall(completion)
    return found[-1].replace(",", "").replace("$", "") if found else None


def gsm8k_strict_correct(completion: str, reference: str | None) -> bool:
    """verl's strict GSM8K check: the extracted string equals the reference (its commas removed) exactly."""
    answer = gsm8k_strict_answer(completion)
    return answer is not None and reference is not None and answer == str(reference).strip().replace(",", "")


def rule_correct(batch: RolloutBatch, match: str = "verified") -> list[bool]:
    """Which completions the rule accepts: math-verify's verdicts, or verl's strict GSM8K string match."""
    if match == "gsm8k_strict":
        return [gsm8k_strict_correct(c, r) for c, r in zip(batch.completions, batch.references or [None] * len(batch))]
    return [v.correct for v in batch.verdicts()]


@register("rule")
class RuleReward(RewardSource):
    label = "Rule-based (GT-GRPO)"
    table_order = 0

    needs_references = True
    default = True  # what a config without `rewards:` trains with
    ground_truth = True  # the verifier's verdict itself: the reference other rewards are measured against

    @dataclass
    class Params:
        correct: float = 1.0  # reward of a completion whose answer verifies equal to the reference
        incorrect: float = 0.0  # reward of any other completion (no answer, wrong answer, verifier timeout)
        match: Literal["verified", "gsm8k_strict"] = "verified"  # math-verify equivalence, or verl's strict `#### <number>` string match (the Cooper authors' GSM8K rule)

    def compute(self, batch: RolloutBatch) -> list[float]:
        batch.require_columns(self.name, "reference")
        return [self.params.correct if ok else self.params.incorrect for ok in rule_correct(batch, self.params.match)]
