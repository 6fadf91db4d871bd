"""What Cooper watches in its own metrics (rewards/health.py): a step with no valid (positive, negative) pair
(`rm/valid_pair_rate` = 0), with the reason: no rollout the rule verifier accepts (`rm/positive_rate` = 0), the
assistant's requests failed (`assistant/failures`), or every negative was rejected (`assistant/rejected`); an RM
that did not move although the step had pairs (a frozen RM: `rm/update_norm` ≤ FROZEN_RELATIVE · `rm/weight_norm`,
learner.py), warned at once; and at the end, on how many steps the RM learned ("RM updated on N of M steps")."""

from __future__ import annotations

import math
from typing import Any

from coreward.rewards.health import Check, HealthWatch, Span


# An update that moved the RM's weights by less than this fraction of their norm left it as it was: below float32's
# resolution (~6e-8 of each weight) most weights did not change at all, while a healthy update moves them by orders
# of magnitude more.
FROZEN_RELATIVE = 1e-9


def no_pair_reason(logs: dict[str, Any]) -> str:
    """Why a Cooper step had no valid pair, from its metrics."""
    if logs.get("rm/positive_rate", 1.0) == 0:
        return "no verified positive (no rollout the rule verifier accepts)"
    if logs.get("assistant/failures", 0) > 0 and logs.get("assistant/rejected", 0) == 0:
        return "assistant failures (its requests came back empty: see the warnings above for the error)"
    if logs.get("assistant/rejected", 0) > 0:
        return "every negative rejected (the assistant's texts still verified equal to the positive, or had no answer)"
    return "no pair for another reason"


class RMWatch(HealthWatch):
    """Whether Cooper's RM learns: its pairs, and how far each update moved it."""

    def __init__(self):
        self.steps = self.updates = 0
        self.reasons: dict[str, int] = {}
        self.update_norm = Span()

    def check(self, logs: dict[str, Any], step: int) -> list[Check]:
        if "rm/valid_pair_rate" not in logs:
            return []
        self.steps += 1
        none = logs["rm/valid_pair_rate"] == 0
        reason = no_pair_reason(logs) if none else None
        if reason:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        learned = "rm/loss" in logs  # the step had pairs and the learner ran on them
        norm, weights = logs.get("rm/update_norm"), logs.get("rm/weight_norm", math.inf)
        if learned and norm is not None:
            self.update_norm.add(step, norm)
        frozen = learned and norm is not None and norm <= FROZEN_RELATIVE * weights
        self.updates += learned and not frozen
        return [
            Check("no_pair", none, lambda: f"Cooper has had no valid pair, so its RM has not learned: {reason}; it is "
                                           "scoring as a static RM"),
            Check("rm_frozen", frozen, lambda: (
                f"Cooper's RM did not move in its update although the step had pairs (rm/update_norm = {norm:.3g}, "
                f"{norm / weights:.1e} of its weights' norm): it is scoring as a static RM. Its learning rate may be "
                "too small for its weights' precision (a bfloat16 RM with master_weights: none rounds steps of about "
                "lr away), or every update was skipped for a non-finite gradient (rm/skipped_updates)"), at_once=True),
        ]

    def report(self, broken: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
        norms = self.update_norm.as_dict()
        counts = {"cooper_steps": self.steps, "rm_updates": self.updates, "no_pair_reasons": self.reasons,
                  "rm_update_norm": norms}
        if not self.steps:
            return counts, []
        frozen = broken.get("rm_frozen", 0)
        line = (f"Cooper: RM updated on {self.updates} of {self.steps} steps; steps with no valid pair: "
                f"{broken.get('no_pair', 0)}" + "".join(f"; {n} × {why}" for why, n in sorted(self.reasons.items()))
                + (f"; steps with pairs whose update left the RM unchanged (frozen): {frozen}" if frozen else "")
                + (f"; RM update norm ‖Δθ‖ of the steps with pairs: min {norms['min']['value']:.3g} (step "
                   f"{norms['min']['step']}), max {norms['max']['value']:.3g} (step {norms['max']['step']})"
                   if norms else ""))
        return counts, [line]


class CooperHealth:
    """Mixed into CooperReward: its watches, with its LLM judge's when positives are judged."""

    def health_watches(self) -> list[HealthWatch]:
        judge = getattr(self, "_judge", None)
        return [RMWatch(), *(judge.health_watches() if judge is not None else [])]
