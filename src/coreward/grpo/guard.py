"""The overoptimization guard: the step where verified accuracy turns down while the reward holds, and `best/`.

Both papers are about a policy that learns to please its reward instead of solving the problem. It shows in
the run's own metrics: the training reward keeps rising (or holds) while the verified accuracy of the same
rollouts falls, so the gap reward − verified opens (Gao, Schulman and Hilton 2022). The rule that finds that step,
from the training rollouts' verified accuracy (or the held-out evaluation of a label-free run), is
`evaluation/guard.py`'s; its defaults were chosen on the hackability map's cells (docs/overoptimization.md, "The
overoptimization guard").

At the alarm: a warning line and `guard/alarm` = 1 in that step's metrics (0 on the others), always; with
`guard.stop: true` the run stops there (its final/ is that step's model) and says why. Independently, `best/`
beside `final/` holds the policy at the best verified accuracy seen so far (smoothed), rewritten when it improves
by at least `best_min_gain`; it is no `checkpoint-N`, so `save_total_limit` never rotates it away. best/ holds
the weights after the step whose rollouts (sampled before that step's update) reached the best: one update later
than those rollouts' policy, as in any trainer that selects on training-time metrics.

The same rule replayed over a finished run's metrics.jsonl (`evaluation.guard.replay`) is what `coreward report`
and `coreward map` mark: where the alarm fired, or would have for a run trained before the guard existed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from coreward.evaluation.guard import GuardSettings, Reading, Watch, replay
from coreward.grpo.health import is_training_log
from coreward.runtime.distributed import on_main_then_broadcast, print_once


BEST_DIR, GUARD_FILE, BEST_INFO = "best", "guard.json", "coreward_best.json"


# ------------------------------------------------------------------------------------------- during training
class GuardCallback(TrainerCallback):
    """The guard during training. Inserted first among the callbacks, so `guard/*` reaches every logger's row."""

    def __init__(self, settings: GuardSettings, run_dir: str | Path, trainer: Any, tokenizer: Any = None):
        self.settings, self.run_dir = settings, Path(run_dir)
        self.trainer, self.tokenizer = trainer, tokenizer
        self.watch = Watch(settings)
        self.best_written: float | None = None
        self.stopped_at: int | None = None
        self.warning: str | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        """A resumed run's guard is the one it had at its checkpoint: its metrics replayed up to there."""
        from coreward.runtime.metrics import read_metrics

        rows = [r for r in read_metrics(self.run_dir / "metrics.jsonl") if r.get("step", 0) <= state.global_step]
        self.watch = replay(rows, self.settings)[0]
        run_dir, step = self.run_dir, state.global_step

        def best_of_main() -> float | None:
            best = read_best(run_dir)
            if best is not None and best.get("step", 0) > step:
                from coreward.grpo.checkpoints import discard

                discard(run_dir / BEST_DIR)  # from steps the resumed run trains again: not this run's any more
                return None
            return best.get("verified") if best else None

        # whether to write best/ is a collective decision: every process holds the main one's record
        self.best_written = on_main_then_broadcast(best_of_main)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return control
        step = state.global_step
        is_train = is_training_log(logs)
        reading = self.watch.train_row(step, logs) if is_train else self.watch.eval_row(step, logs)
        if is_train:
            logs["guard/alarm"] = 0.0
        if reading is None:
            return control
        logs["guard/verified_drop"] = reading.drop
        write_best = self.settings.keep_best and reading.new_best and (
            self.best_written is None or reading.verified >= self.best_written + self.settings.best_min_gain)
        # the same decisions on every process (stopping, and best/'s collective save, must never diverge): the
        # logged metrics are the gathered batch's everywhere, and the main process's word settles any doubt
        alarm, write_best = on_main_then_broadcast(lambda: (reading.alarm, write_best))
        if alarm:
            logs["guard/alarm"] = 1.0
            self._alarm(reading, control)
        if write_best:
            self._write_best(reading)
        return control

    def _alarm(self, reading: Reading, control) -> None:
        source = self.watch.source
        change = f"rose by {-reading.fall:.3f}" if reading.fall <= 0 else f"fell by only {reading.fall:.3f}"
        self.warning = (f"guard: step {reading.step}: verified accuracy ({source}) fell from {reading.peak:.3f} "
                        f"(step {reading.peak_step}) to {reading.verified:.3f} while the reward {change}"
                        + (" (on its range so far)" if self.watch.detector.reward_scale() != 1.0 else "")
                        + ": the reward is being overoptimized")
        kept = read_best(self.run_dir)
        best = f"; the best model (step {kept['step']}) is in best/" if kept else ""
        if self.settings.stop:
            self.stopped_at = reading.step
            control.should_training_stop = True
            print_once(f"{self.warning}. Stopping (guard.stop: true){best}")
        else:
            print_once(f"warning: {self.warning}{best}. Training goes on (guard.stop: true stops a run here)")

    def _write_best(self, reading: Reading) -> None:
        """best/ written whole beside the old one, then swapped in (a kill leaves one complete best/, see
        `recover_best`). Every process takes part: a sharded policy is gathered collectively."""
        from coreward.grpo.checkpoints import discard, mark_complete

        trainer, fresh = self.trainer, self.run_dir / (BEST_DIR + ".new")
        main = trainer.accelerator.is_main_process
        if main and fresh.exists():
            discard(fresh)
        trainer.accelerator.wait_for_everyone()
        trainer.save_model(str(fresh))
        if main:
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(str(fresh))
            info = {"step": reading.step, "verified": reading.verified, "reward": reading.reward,
                    "source": self.watch.source, "smooth": self.settings.smooth}
            (fresh / BEST_INFO).write_text(json.dumps(info, indent=1) + "\n")
            mark_complete(fresh)
            if (self.run_dir / BEST_DIR).exists():
                discard(self.run_dir / BEST_DIR)
            os.replace(fresh, self.run_dir / BEST_DIR)
        trainer.accelerator.wait_for_everyone()
        self.best_written = reading.verified

    def summary(self) -> dict[str, Any]:
        detector = self.watch.detector
        best = read_best(self.run_dir)
        line = (f"guard: fired at step {detector.fired_at}" if detector.fired_at is not None
                else "guard: no overoptimization detected")
        if detector.peak is not None:
            line += f"; verified accuracy ({self.watch.source}) peaked at {detector.peak:.3f} (step {detector.peak_step})"
        if best:
            line += f"; best/ holds step {best['step']}"
        return {"settings": asdict(self.settings), "source": self.watch.source, "fired_at": detector.fired_at,
                "stopped_at": self.stopped_at, "peak": detector.peak, "peak_step": detector.peak_step,
                "best": best, "warning": self.warning, "line": line}

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or self.watch.source is None:
            return
        report = self.summary()
        (self.run_dir / GUARD_FILE).write_text(json.dumps(report, indent=1) + "\n")
        print_once(report["line"])


def read_best(run_dir: str | Path) -> dict[str, Any] | None:
    """best/'s record (step, verified accuracy, ...), None when the run has no complete best/."""
    from coreward.grpo.checkpoints import COMPLETE_MARKER

    best = Path(run_dir) / BEST_DIR
    if not (best / COMPLETE_MARKER).is_file() or not (best / BEST_INFO).is_file():
        return None
    return json.loads((best / BEST_INFO).read_text())


def recover_best(run_dir: str | Path) -> None:
    """A kill between retiring the old best/ and renaming the new one leaves only a complete best.new/: it is best/."""
    from coreward.grpo.checkpoints import COMPLETE_MARKER

    run_dir = Path(run_dir)
    fresh = run_dir / (BEST_DIR + ".new")
    if not (run_dir / BEST_DIR).exists() and (fresh / COMPLETE_MARKER).is_file():
        os.replace(fresh, run_dir / BEST_DIR)


def add_guard(trainer: Any, settings: GuardSettings, run_dir: str | Path, tokenizer: Any = None) -> GuardCallback | None:
    """The guard as the trainer's first callback (its `guard/*` values reach every logger); None when disabled."""
    if not settings.enabled:
        return None
    if trainer.accelerator.is_main_process:
        recover_best(run_dir)
    guard = GuardCallback(settings, run_dir, trainer, tokenizer)
    trainer.callback_handler.callbacks.insert(0, guard)
    return guard
