"""A run that tells the truth about itself: invariants read from each logged step, a warning when one breaks (for
PATIENCE steps in a row, or at once where one step is already wrong), and a health summary at the end (printed, and
written to the run directory as `health.json`; also written when the run stops on an error).

Watched from the metrics the run logs, so it costs nothing here (what it costs to measure them is said where they are
measured). The engine watches one invariant of every source: all groups' rewards constant (`frac_reward_zero_std` =
1: no group has an advantage, so the policy's update is zero: no learning signal). Each reward source adds its own
(`RewardSource.health_watches`, rewards/health.py): a reward model that stops learning, an LLM judge that gives
no verdict, a teacher's distance from the policy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from coreward.rewards.health import Check, HealthWatch
from coreward.runtime.distributed import print_once


PATIENCE = 5  # steps in a row before a broken invariant that can be a passing phase is warned about
SUMMARY_FILE = "health.json"


def is_training_log(logs: dict[str, Any]) -> bool:
    """Whether a logged dict is a training step's metrics (TRL logs `frac_reward_zero_std` with every one), not an
    evaluation's or the end-of-run summary."""
    return "frac_reward_zero_std" in logs


class HealthCallback(TrainerCallback):
    """Reads each logged step (main process), warns once per streak, and writes the summary at the end; `watches`:
    the reward sources' own (`RewardSource.health_watches`)."""

    def __init__(self, run_dir: str | Path, watches: list[HealthWatch] = (), patience: int = PATIENCE):
        self.run_dir, self.patience = Path(run_dir), patience
        self.watches: list[HealthWatch] = []
        for watch in watches:  # one per class: two sources that share a watch (an LLM judge) count once
            if not any(type(seen) is type(watch) for seen in self.watches):
                self.watches.append(watch)
        self.steps = 0
        self.streaks: dict[str, int] = {}
        self.totals: dict[str, int] = {"no_signal": 0}
        self.warnings: list[str] = []
        self.error: str | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if not is_training_log(logs):
            return
        self.steps += 1
        step = state.global_step
        self._watch(step, Check("no_signal", logs["frac_reward_zero_std"] >= 1.0, lambda: (
            "every group's rewards have been constant (no advantage anywhere): the policy gets no learning signal. "
            "Check that the rewards can tell its completions apart (a policy always right or always wrong under a "
            "0/1 reward learns nothing)")))
        for watch in self.watches:
            for check in watch.check(logs, step):
                self._watch(step, check)

    def _watch(self, step: int, check: Check) -> None:
        patience = 1 if check.at_once else self.patience
        self.totals[check.name] = self.totals.get(check.name, 0) + check.broken
        self.streaks[check.name] = self.streaks.get(check.name, 0) + 1 if check.broken else 0
        if self.streaks[check.name] == patience:
            streak = f"for {patience} steps in a row " if patience > 1 else ""
            line = f"warning: step {step}: {streak}{check.message()}"
            self.warnings.append(line)
            print_once(line)

    def summary(self) -> dict[str, Any]:
        lines = [f"steps with no learning signal (all groups' rewards constant): {self.totals['no_signal']} of "
                 f"{self.steps}"]
        reported: dict[str, Any] = {}
        for watch in self.watches:
            counts, watch_lines = watch.report(self.totals)
            reported.update(counts)
            lines += watch_lines
        if self.error:
            lines.append(f"stopped by an error: {self.error}")
        return {"steps": self.steps, **self.totals, **reported, "warnings": self.warnings, "error": self.error,
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
