"""A run that tells the truth about itself: invariants read from each logged step, a warning when one breaks (for
PATIENCE steps in a row, or at once where one step is already wrong), and a health summary at the end (printed, and
written to the run directory as `health.json`; also written when the run stops on an error).

Watched from the metrics the run logs, so it costs nothing here (what it costs to measure them is said where they are
measured):

* every source: all groups' rewards constant (`frac_reward_zero_std` = 1: no group has an advantage, so the
  policy's update is zero: no learning signal);
* Cooper: no valid (positive, negative) pair (`rm/valid_pair_rate` = 0), with the reason: no rollout the rule
  verifier accepts (`rm/positive_rate` = 0), the assistant's requests failed (`assistant/failures`), or every
  negative was rejected (`assistant/rejected`); an RM that did not move although the step had pairs (a frozen RM:
  `rm/update_norm` ≤ FROZEN_RELATIVE · `rm/weight_norm`, rewards/cooper/learner.py), warned at once; and at the end, on how many
  steps the RM learned ("RM updated on N of M steps": a step with pairs whose update moved it);
* Co-rewarding-I: a prompt group whose other view is not in the same batch (`co_rewarding_1/unpaired_groups` > 0:
  its rollouts have no label), warned at once;
* the LLM judge (the `judge` reward, Cooper's `positive_judge`): a step on which every request failed or came back
  unreadable (`judge/failures` = `judge/calls` > 0: its judged rollouts scored as `on_failure` says), warned at once;
* Co-rewarding-II: the teacher–policy weight distance ‖θ − θ_T‖ (`co_rewarding_2/teacher_distance`), summed up at the
  end. A teacher equal to the policy after it moved is an error that stops the run where it is measured
  (rewards/co_rewarding_2/ema_teacher.py), and the summary says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from coreward.runtime.distributed import print_once


PATIENCE = 5  # steps in a row before a broken invariant that can be a passing phase is warned about
SUMMARY_FILE = "health.json"


def is_training_log(logs: dict[str, Any]) -> bool:
    """Whether a logged dict is a training step's metrics (TRL logs `frac_reward_zero_std` with every one), not an
    evaluation's or the end-of-run summary."""
    return "frac_reward_zero_std" in logs
# An update that moved the RM's weights by less than this fraction of their norm left it as it was: below float32's
# resolution (~6e-8 of each weight), most weights did not change at all. A healthy update at Cooper's lr moves the
# demo RM by ~1e-3 of its norm per step; a bfloat16 RM without float32 masters at lr 1e-9 by 0.
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


class Span:
    """The first, last, smallest and largest value of a per-step metric, with their steps."""

    def __init__(self):
        self.first = self.last = self.least = self.most = None  # (step, value)

    def add(self, step: int, value: float) -> None:
        self.first = self.first or (step, value)
        self.last = (step, value)
        if self.least is None or value < self.least[1]:
            self.least = (step, value)
        if self.most is None or value > self.most[1]:
            self.most = (step, value)

    def as_dict(self) -> dict[str, Any] | None:
        if self.first is None:
            return None
        return {name: {"step": step, "value": value} for name, (step, value) in
                (("first", self.first), ("last", self.last), ("min", self.least), ("max", self.most))}


class HealthCallback(TrainerCallback):
    """Reads each logged step (main process), warns once per streak, and writes the summary at the end."""

    def __init__(self, run_dir: str | Path, patience: int = PATIENCE):
        self.run_dir, self.patience = Path(run_dir), patience
        self.steps = 0
        self.streaks = {"no_signal": 0, "no_pair": 0, "rm_frozen": 0, "unpaired_views": 0, "judge_silent": 0}
        self.totals = {"no_signal": 0, "no_pair": 0, "rm_updates": 0, "cooper_steps": 0, "rm_frozen": 0,
                       "unpaired_views": 0, "co_rewarding_1_steps": 0, "judge_silent": 0, "judge_steps": 0}
        self.warnings: list[str] = []
        self.reasons: dict[str, int] = {}
        self.rm_update_norm, self.teacher_distance = Span(), Span()
        self.error: str | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if not is_training_log(logs):
            return
        self.steps += 1
        step = state.global_step
        self._watch("no_signal", logs["frac_reward_zero_std"] >= 1.0, step,
                    lambda: "every group's rewards have been constant (no advantage anywhere): the policy gets no "
                            "learning signal. Check that the rewards can tell its completions apart (a policy "
                            "always right or always wrong under a 0/1 reward learns nothing)")
        if "rm/valid_pair_rate" in logs:
            self._watch_cooper(logs, step)
        if "co_rewarding_1/unpaired_groups" in logs:
            self.totals["co_rewarding_1_steps"] += 1
            unpaired = logs["co_rewarding_1/unpaired_groups"]
            self._watch("unpaired_views", unpaired > 0, step,
                        lambda: f"{unpaired:.0f} of Co-rewarding-I's prompt groups had no other view of their problem "
                                "in the batch, so their rollouts got no label and no reward. Both views of a pair are "
                                "rolled out in one generation batch by its paired sampler (grpo/samplers.py): "
                                "something else chose these rows", patience=1)
        if "co_rewarding_2/teacher_distance" in logs:
            self.teacher_distance.add(step, logs["co_rewarding_2/teacher_distance"])
        if "judge/calls" in logs:
            self.totals["judge_steps"] += 1
            calls, failures = logs["judge/calls"], logs.get("judge/failures", 0.0)
            self._watch("judge_silent", calls > 0 and failures >= calls, step,
                        lambda: f"the LLM judge gave no verdict ({failures:.0f} of {calls:.0f} requests failed or came "
                                "back unreadable): its judged rollouts scored as its `on_failure` says; the judge's "
                                "warnings above give the error", patience=1)

    def _watch_cooper(self, logs: dict[str, Any], step: int) -> None:
        self.totals["cooper_steps"] += 1
        none = logs["rm/valid_pair_rate"] == 0
        reason = no_pair_reason(logs) if none else None
        if reason:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        self._watch("no_pair", none, step,
                    lambda: f"Cooper has had no valid pair, so its RM has not learned: {reason}; it is scoring as "
                            "a static RM")
        learned = "rm/loss" in logs  # the step had pairs and the learner ran on them
        norm, weights = logs.get("rm/update_norm"), logs.get("rm/weight_norm", math.inf)
        if learned and norm is not None:
            self.rm_update_norm.add(step, norm)
        frozen = learned and norm is not None and norm <= FROZEN_RELATIVE * weights
        self.totals["rm_updates"] += learned and not frozen
        self._watch("rm_frozen", frozen, step,
                    lambda: f"Cooper's RM did not move in its update although the step had pairs (rm/update_norm = "
                            f"{norm:.3g}, {norm / weights:.1e} of its weights' norm): it is scoring as a static RM. "
                            "Its learning rate may be too small for its weights' precision (a bfloat16 RM with "
                            "master_weights: none rounds steps of about lr away), or every update was skipped for a "
                            "non-finite gradient (rm/skipped_updates)", patience=1)

    def _watch(self, name: str, broken: bool, step: int, message, patience: int | None = None) -> None:
        patience = patience or self.patience
        self.totals[name] += broken
        self.streaks[name] = self.streaks[name] + 1 if broken else 0
        if self.streaks[name] == patience:
            streak = f"for {patience} steps in a row " if patience > 1 else ""
            line = f"warning: step {step}: {streak}{message()}"
            self.warnings.append(line)
            print_once(line)

    def summary(self) -> dict[str, Any]:
        lines = [f"steps with no learning signal (all groups' rewards constant): {self.totals['no_signal']} of "
                 f"{self.steps}"]
        if self.totals["cooper_steps"]:
            norms = self.rm_update_norm.as_dict()
            lines.append(f"Cooper: RM updated on {self.totals['rm_updates']} of {self.totals['cooper_steps']} steps; "
                         f"steps with no valid pair: {self.totals['no_pair']}"
                         + "".join(f"; {n} × {why}" for why, n in sorted(self.reasons.items()))
                         + (f"; steps with pairs whose update left the RM unchanged (frozen): {self.totals['rm_frozen']}"
                            if self.totals["rm_frozen"] else "")
                         + (f"; RM update norm ‖Δθ‖ of the steps with pairs: min {norms['min']['value']:.3g} (step "
                            f"{norms['min']['step']}), max {norms['max']['value']:.3g} (step {norms['max']['step']})"
                            if norms else ""))
        if self.totals["co_rewarding_1_steps"]:
            lines.append(f"Co-rewarding-I: steps with a pair's other view missing from the batch: "
                         f"{self.totals['unpaired_views']} of {self.totals['co_rewarding_1_steps']}")
        if self.totals["judge_steps"]:
            lines.append(f"LLM judge: steps with no verdict at all (every request failed or unreadable): "
                         f"{self.totals['judge_silent']} of {self.totals['judge_steps']}")
        distance = self.teacher_distance.as_dict()
        if distance:
            lines.append(f"Co-rewarding-II: teacher–policy weight distance ‖θ − θ_T‖ {distance['first']['value']:.3g} "
                         f"at step {distance['first']['step']}, {distance['last']['value']:.3g} at step "
                         f"{distance['last']['step']} (min {distance['min']['value']:.3g} at step "
                         f"{distance['min']['step']})")
        if self.error:
            lines.append(f"stopped by an error: {self.error}")
        return {"steps": self.steps, **self.totals, "no_pair_reasons": self.reasons, "warnings": self.warnings,
                "rm_update_norm": self.rm_update_norm.as_dict(), "teacher_distance": distance, "error": self.error,
                "lines": lines}

    def write(self, state) -> None:
        """Print the summary and write health.json (main process)."""
        if not state.is_world_process_zero or not (self.steps or self.error):
            return
        report = self.summary()
        (self.run_dir / SUMMARY_FILE).write_text(json.dumps(report, indent=1) + "\n")
        print_once("health: " + "\nhealth: ".join(report["lines"]))

    def on_train_end(self, args, state, control, **kwargs):
        self.write(state)

    def stopped_by(self, error: BaseException, state) -> None:
        """The run is stopping on `error` (the trainer raised it): the summary of the steps so far, with why."""
        self.error = f"after {state.global_step} completed steps: {error}"
        self.write(state)
