"""A run that tells the truth about itself: invariants read from each logged step, a warning when one breaks for
PATIENCE steps in a row, and a health summary at the end (printed, and written to the run directory as
`health.json`).

Watched from the metrics every run already logs, so it costs nothing:

* every source: all groups' rewards constant (`frac_reward_zero_std` = 1: no group has an advantage, so the
  policy's update is zero: no learning signal);
* Cooper: no valid (positive, negative) pair (`rm/valid_pair_rate` = 0), with the reason: no rollout the rule
  verifier accepts (`rm/positive_rate` = 0), the assistant's requests failed (`assistant/failures`), or every
  negative was rejected (`assistant/rejected`); and at the end, on how many steps the RM learned ("RM updated on
  N of M steps": a step with pairs logs `rm/loss`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from coreward.runtime.distributed import print_once


PATIENCE = 5  # steps in a row before a broken invariant is warned about
SUMMARY_FILE = "health.json"


def no_pair_reason(logs: dict[str, Any]) -> str:
    """Why a Cooper step had no valid pair, from its metrics."""
    if logs.get("rm/positive_rate", 1.0) == 0:
        return "no verified positive (no rollout the rule verifier accepts)"
    if logs.get("assistant/failures", 0) > 0 and logs.get("assistant/rejected", 0) == 0:
        return "assistant failures (its requests came back empty: see the warnings above for the error)"
    if logs.get("assistant/rejected", 0) > 0:
        return "every negative rejected (the assistant's texts still verified equal to the positive, or had no answer)"
    return "no pair for another reason"


class HealthCallback(TrainerCallback):
    """Reads each logged step (main process), warns once per streak, and writes the summary at the end."""

    def __init__(self, run_dir: str | Path, patience: int = PATIENCE):
        self.run_dir, self.patience = Path(run_dir), patience
        self.steps = 0
        self.streaks = {"no_signal": 0, "no_pair": 0}
        self.totals = {"no_signal": 0, "no_pair": 0, "rm_updates": 0, "cooper_steps": 0}
        self.warnings: list[str] = []
        self.reasons: dict[str, int] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "frac_reward_zero_std" not in logs:  # not a training step's log (evaluation, the end-of-run summary)
            return
        self.steps += 1
        self._watch("no_signal", logs["frac_reward_zero_std"] >= 1.0, state.global_step,
                    lambda: "every group's rewards have been constant (no advantage anywhere): the policy gets no "
                            "learning signal. Check that the rewards can tell its completions apart (a policy "
                            "always right or always wrong under a 0/1 reward learns nothing)")
        if "rm/valid_pair_rate" in logs:
            self.totals["cooper_steps"] += 1
            self.totals["rm_updates"] += "rm/loss" in logs
            none = logs["rm/valid_pair_rate"] == 0
            reason = no_pair_reason(logs) if none else None
            if reason:
                self.reasons[reason] = self.reasons.get(reason, 0) + 1
            self._watch("no_pair", none, state.global_step,
                        lambda: f"Cooper has had no valid pair, so its RM has not learned: {reason}; it is scoring as "
                                "a static RM")

    def _watch(self, name: str, broken: bool, step: int, message) -> None:
        self.totals[name] += broken
        self.streaks[name] = self.streaks[name] + 1 if broken else 0
        if self.streaks[name] == self.patience:
            line = f"warning: step {step}: for {self.patience} steps in a row {message()}"
            self.warnings.append(line)
            print_once(line)

    def summary(self) -> dict[str, Any]:
        lines = [f"steps with no learning signal (all groups' rewards constant): {self.totals['no_signal']} of "
                 f"{self.steps}"]
        if self.totals["cooper_steps"]:
            lines.append(f"Cooper: RM updated on {self.totals['rm_updates']} of {self.totals['cooper_steps']} steps; "
                         f"steps with no valid pair: {self.totals['no_pair']}"
                         + "".join(f"; {n} × {why}" for why, n in sorted(self.reasons.items())))
        return {"steps": self.steps, **self.totals, "no_pair_reasons": self.reasons, "warnings": self.warnings,
                "lines": lines}

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or not self.steps:
            return
        report = self.summary()
        (self.run_dir / SUMMARY_FILE).write_text(json.dumps(report, indent=1) + "\n")
        print_once("health: " + "\nhealth: ".join(report["lines"]))
