"""Majority voting (TTRL): agree with your own group.

For a group g of G rollouts with extracted answers a_1..a_G:

    ŷ_g = argmax_a Σ_{i∈g} 1[a_i ≡ a]      (empty answers don't vote; ties: first seen)
    r_i = 1[a_i ≡ ŷ_g]                     (a rollout with no answer gets 0)

No reference answer is used. When references exist, `majority/label_accuracy` logs how often ŷ_g is
the true answer, so one can watch the self-supervised signal drift from the truth.
"""

from __future__ import annotations

from dataclasses import dataclass

from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.rewards.voting import Extract, Match, label_accuracy, majority_votes


@register("majority")
class MajorityVoteReward(RewardSource):
    label = "Majority voting"
    step_cost = 1.25
    table_order = 0

    @dataclass
    class Params:
        match: Match = "verified"  # "verified": math-verify equivalence classes; "exact": equal strings (TTRL's)
        extract: Extract = "default"  # "default": extract_answer (boxed, ####, "the answer is", cleaned); "boxed_raw": the raw last \boxed{} (the Co-rewarding authors' baseline)

    def compute(self, batch: RolloutBatch) -> list[float]:
        verifier = batch.verifier
        answers = batch.extracted_answers(self.params.extract)
        rewards, labels = [], []
        for label, classes, winner in majority_votes([[answers[i] for i in rows] for rows in batch.groups()],
                                                     self.params.match, verifier, batch.map_shards):
            rewards += [1.0 if winner is not None and c == winner else 0.0 for c in classes]
            labels.append(label)
        group_refs = [batch.references[rows.start] for rows in batch.groups()] if batch.references else None
        batch.log("majority/label_accuracy", label_accuracy(labels, group_refs, verifier))
        batch.log("majority/no_label_rate", sum(l is None for l in labels) / len(labels))
        return rewards
