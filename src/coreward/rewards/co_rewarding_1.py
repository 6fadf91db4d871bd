"""Co-rewarding-I: agree with the *other* view of the same problem.

Each question q has a rephrasing q' (same math, same answer, from `rephrasings`); both are rolled out G
times in the same step (see `grpo/samplers.py`). With a_i the extracted answers:

    ŷ(q)  = majority of a(q'-rollouts)        ŷ(q') = majority of a(q-rollouts)
    r_i   = 1[a_i ≡ ŷ(other view)]            (empty pseudo label or empty answer: 0)

Advantages stay normalized within each view's own group of G (TRL's groups), and both views are
trained on, so the loss is L_q + L_q' (`view_loss` says how each view's tokens are averaged). A policy can't raise this reward by being consistent with
itself on one wording only: the label comes from a different wording of the problem.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from coreward.rewards.base import DataNeeds, RewardSource, RolloutBatch, register
from coreward.rewards.health import Check, HealthWatch
from coreward.rewards.voting import Extract, Match, label_accuracy, majority_votes, matches_label
from coreward.runtime.errors import CorewardError


logger = logging.getLogger(__name__)


@register("co_rewarding_1")
class CrossViewReward(RewardSource):
    label = "Co-rewarding-I"
    step_cost = 1.15
    table_order = 3

    @dataclass
    class Params:
        match: Match = "exact"  # "exact": equal strings (the authors'); "verified": math-verify equivalence
        extract: Extract = "default"  # "default": extract_answer (boxed, ####, "the answer is", cleaned); "boxed_raw": the authors' raw last \boxed{} (co_reward.py)
        rephrasings: str | None = None  # each question's rephrasing, rolled out beside it: "demo" or "arith" (the task's own wording) or a file from `coreward rephrase` / a verl rewrite parquet aligned with data.train
        view_loss: Literal["joint", "per_view"] = "joint"  # how the two views' losses combine: "joint" (one token mean over both, TRL's), or "per_view" (each view's loss averaged over its own tokens, the two summed: the authors' dp_actor.py; needs grpo.loss_type bnpo)

        def validate(self) -> None:
            if self.view_loss == "per_view" and not self.rephrasings:
                raise ValueError("view_loss: per_view needs paired views (set rephrasings)")

    @classmethod
    def data_needs(cls, params: Params) -> DataNeeds:
        return DataNeeds(rephrasings=params.rephrasings, loss_per_view=params.view_loss == "per_view")

    def health_watches(self) -> list[HealthWatch]:
        return [UnpairedWatch()]

    @property
    def match(self) -> Match:
        return self.params.match

    def compute(self, batch: RolloutBatch) -> list[float | None]:
        verifier = batch.verifier
        answers = batch.extracted_answers(self.params.extract)
        groups = batch.groups()
        partner = pair_groups(batch)
        votes = majority_votes([[answers[i] for i in rows] for rows in groups], self.match, verifier, batch.map_shards)
        majorities = [vote[0] for vote in votes]

        # a group whose other view is not in this batch has no label: its rollouts get no reward (None: TRL's "not
        # applicable", advantage 0) rather than one made up, and the step counts them (`UnpairedWatch` warns)
        rewards: list[float | None] = [None] * len(batch)
        unpaired = [g for g, other in enumerate(partner) if other is None]
        batch.log("co_rewarding_1/unpaired_groups", float(len(unpaired)))
        if unpaired:  # batch.step counts the steps done before this one; metrics.jsonl numbers this step batch.step + 1
            logger.warning("co_rewarding_1: step %d: %d of %d prompt groups have no other view in the batch (pairs %s); "
                           "their rollouts get no reward", batch.step + 1, len(unpaired), len(groups),
                           ", ".join(str(batch.columns["pair_id"][groups[g].start]) for g in unpaired[:5]))
        for g, rows in enumerate(groups):
            if partner[g] is None:
                continue
            label = majorities[partner[g]]  # the other view's majority answer
            for i, ok in zip(rows, matches_label(label, [answers[i] for i in rows], self.match, verifier)):
                rewards[i] = 1.0 if ok else 0.0
        self._log(batch, majorities, partner, verifier)
        return rewards

    def _log(self, batch: RolloutBatch, majorities, partner, verifier) -> None:
        views = [batch.columns["view"][rows.start] for rows in batch.groups()]
        refs = batch.references
        for view in (0, 1):
            groups = [g for g, v in enumerate(views) if v == view and partner[g] is not None]
            labels = [majorities[partner[g]] for g in groups]  # the labels this view's rollouts were rewarded on
            group_refs = [refs[batch.groups()[g].start] for g in groups] if refs else None
            batch.log(f"co_rewarding_1/label_accuracy_view{view}", label_accuracy(labels, group_refs, verifier))
        originals = [g for g, v in enumerate(views) if v == 0 and partner[g] is not None]
        agree = [
            majorities[g] is not None
            and matches_label(majorities[g], [majorities[partner[g]]], self.match, verifier)[0]
            for g in originals
        ]
        batch.log("co_rewarding_1/view_agreement", sum(agree) / max(1, len(agree)))


def pair_groups(batch: RolloutBatch) -> list[int | None]:
    """For each group, the index of the group holding the other view of the same problem (None: that view is not in
    this generation batch; the paired sampler puts both views of a pair in one batch, so None is a broken invariant)."""
    for column in ("pair_id", "view"):
        if column not in batch.columns:
            raise CorewardError(
                f"reward 'co_rewarding_1' needs paired views: set its params.rephrasings (dataset column {column!r} missing)"
            )
    where: dict[tuple[str, int], int] = {}
    for g, rows in enumerate(batch.groups()):
        where[(str(batch.columns["pair_id"][rows.start]), int(batch.columns["view"][rows.start]))] = g
    if len(where) != len(batch.groups()):
        raise RuntimeError("a (pair_id, view) appears in two groups of one generation batch (sampler broken)")
    return [where.get((pair_id, 1 - view)) for (pair_id, view), _ in sorted(where.items(), key=lambda item: item[1])]


class UnpairedWatch(HealthWatch):
    """A prompt group whose other view is not in the same batch (`co_rewarding_1/unpaired_groups` > 0: its rollouts
    have no label), warned at once."""

    def __init__(self):
        self.steps = 0

    def check(self, logs: dict[str, Any], step: int) -> list[Check]:
        if "co_rewarding_1/unpaired_groups" not in logs:
            return []
        self.steps += 1
        unpaired = logs["co_rewarding_1/unpaired_groups"]
        return [Check("unpaired_views", unpaired > 0, lambda: (
            f"{unpaired:.0f} of Co-rewarding-I's prompt groups had no other view of their problem in the batch, so "
            "their rollouts got no label and no reward. Both views of a pair are rolled out in one generation batch "
            "by its paired sampler (grpo/samplers.py): something else chose these rows"), at_once=True)]

    def report(self, broken: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
        lines = [f"Co-rewarding-I: steps with a pair's other view missing from the batch: "
                 f"{broken.get('unpaired_views', 0)} of {self.steps}"] if self.steps else []
        return {"co_rewarding_1_steps": self.steps}, lines
