"""The overoptimization guard: the step where verified accuracy turns down while the reward holds, and `best/`.

Both papers are about a policy that learns to please its reward instead of solving the problem. It shows in
the run's own metrics: the training reward keeps rising (or holds) while the verified accuracy of the same
rollouts falls, so the gap reward − verified opens (Gao, Schulman and Hilton 2022). The rule that finds that step,
from the training rollouts' verified accuracy (or the held-out evaluation of a label-free run), is
`evaluation/guard.py`'s; its defaults were chosen on the hackability map's cells (docs/results.md, "The
overoptimization guard and the KL axis"; the rule: docs/explanation/guard.md).

At start the guard says what it watches: the training rollouts' verified accuracy (training data with reference
answers), else the held-out set's avg@N (a held-out set with references, evaluated every `data.eval_every` steps),
else nothing: then it says so once and is off (no `guard/*` metrics, no best/, no guard.json). A held-out set without
references logs agreement (`eval/agree@N`), not accuracy: evaluation/guard.py says why the guard does not read it.

At the alarm: a warning line and `guard/alarm` = 1 in that step's metrics (0 on the others), always; with
`guard.stop: true` the run stops there (its final/ is that step's model) and says why. Independently, `best/`
beside `final/` holds the policy at the best verified accuracy seen so far (smoothed), rewritten when it improves
by at least `best_min_gain`; it is no `checkpoint-N`, so `save_total_limit` never rotates it away. best/ is a link
to a complete directory `.best-STEP/`: a new one is written whole beside it, and one atomic rename of a new link over
best/ swaps it in, so a reader (or a kill) sees the old complete best/ or the new one, never neither. best/ holds
the weights after the step whose rollouts (sampled before that step's update) reached the best: one update later
than those rollouts' policy, as in any trainer that selects on training-time metrics.

With several processes every decision is the main process's, shared at the one point every process reaches
for every logged row (`GuardCallback.on_log`): every process logs the same rows, equally often (the training
metrics are the gathered batch's, and periodic evaluation gives its result to every process), so the broadcast
there, best/'s collective save and the stop are entered by every process or by none.

The same rule replayed over a finished run's metrics.jsonl (`evaluation.guard.replay`) is what `coreward report`
and `coreward map` mark: where the alarm fired, or would have for a run trained before the guard existed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from coreward.evaluation.guard import HELD_OUT, TRAINING, GuardSettings, Reading, replay
from coreward.grpo.health import is_training_log
from coreward.runtime.distributed import on_main_then_broadcast, print_once
from coreward.runtime.files import COMPLETE_MARKER, atomic_write_text


BEST_DIR, GUARD_FILE, BEST_INFO = "best", "guard.json", "coreward_best.json"
BEST_PREFIX = ".best-"  # best/ links to .best-STEP/
LINK_STAGING = ".best.link"  # the new link, renamed over best/


# ------------------------------------------------------------------------------------------- what it watches
def guard_signal(trainer: Any, eval_records: list | None, eval_n: int, eval_name: str = "") -> tuple[str | None, str]:
    """The verified signal the guard can watch in this run (`TRAINING`, `HELD_OUT` or None), and the line that says
    so. `eval_records`: the held-out set evaluated during training (None: no periodic evaluation)."""
    column = getattr(trainer, "reference_column", "answer")
    dataset = trainer.train_dataset
    references = dataset[column] if dataset is not None and column in dataset.column_names else []
    if any(r not in (None, "") for r in references):
        return TRAINING, ("guard: watches the training rollouts' verified accuracy (checked against the training "
                          "data's reference answers) beside the reward")
    held_out = f"the held-out set {eval_name}".rstrip()
    if eval_records and any(record.answer for record in eval_records):
        return HELD_OUT, (f"guard: watches {held_out}'s eval/avg@{eval_n} (the training data has no reference "
                          "answers) beside the reward")
    if eval_records:
        why = (f"{held_out} has none either: its eval/agree@{eval_n} is the share of samples on their most "
               "common answer, which the rewards that vote on answers pay for and which a policy settling on one wrong "
               "answer raises, so it is no accuracy to watch")
    else:
        why = "no held-out set is evaluated (data.eval, data.eval_every)"
    return None, (f"guard: watches nothing: the training data has no reference answers and {why}. No guard/* "
                  "metrics, no best/; a held-out set with reference answers in data.eval gives it a signal")


# ------------------------------------------------------------------------------------------- during training
class GuardCallback(TrainerCallback):
    """The guard during training. Inserted first among the callbacks, so `guard/*` reaches every logger's row."""

    def __init__(self, settings: GuardSettings, run_dir: str | Path, trainer: Any, tokenizer: Any = None,
                 source: str = TRAINING):
        self.settings, self.run_dir = settings, Path(run_dir)
        self.trainer, self.tokenizer = trainer, tokenizer
        self.source = source
        names = getattr(trainer, "reward_func_names", None) or []
        weights = getattr(trainer, "reward_weights", None)
        # each source's own reward is read with its weight (evaluation/guard.py's Detector)
        self.weights = dict(zip(names, weights.tolist())) if weights is not None else None
        self.watch = replay([], settings, source, self.weights)[0]
        self.best_written: float | None = None
        self.stopped_at: int | None = None
        self.alarm_step: int | None = None
        self.warning: str | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        """A resumed run's guard is the one it had at its checkpoint: its metrics replayed up to there."""
        from coreward.runtime.metrics import read_metrics

        rows = [r for r in read_metrics(self.run_dir / "metrics.jsonl") if r.get("step", 0) <= state.global_step]
        self.watch = replay(rows, self.settings, self.source, self.weights)[0]
        run_dir, step = self.run_dir, state.global_step

        def best_of_main() -> float | None:
            best = read_best(run_dir)
            if best is not None and best.get("step", 0) > step:
                remove_best(run_dir)  # from steps the resumed run trains again: not this run's any more
                return None
            return best.get("verified") if best else None

        # whether to write best/ is a collective decision: every process holds the main one's record
        self.best_written = on_main_then_broadcast(best_of_main)

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Read the row; then the main process's reading goes to every process (the module docstring says why every
        process gets here equally often): the alarm, the stop and best/'s collective save follow it everywhere."""
        logs = logs if logs is not None else {}
        step = state.global_step
        is_train = is_training_log(logs)
        reading = None
        if logs:
            reading = self.watch.train_row(step, logs) if is_train else self.watch.eval_row(step, logs)
        reading = on_main_then_broadcast(lambda: reading)
        if reading is not None and reading.alarm:
            self.alarm_step = reading.step
        if logs and (is_train or reading is not None):
            # 1 on the alarm's step: an evaluation's row and its step's training row are one row of metrics.jsonl
            logs["guard/alarm"] = 1.0 if self.alarm_step == step else 0.0
        if reading is None:
            return control
        logs["guard/verified_drop"] = reading.drop
        if reading.alarm:
            self._alarm(reading, control)
        if self.settings.keep_best and reading.new_best and (
                self.best_written is None or reading.verified >= self.best_written + self.settings.best_min_gain):
            self._write_best(reading)
        return control

    def _alarm(self, reading: Reading, control) -> None:
        change = f"rose by {-reading.fall:.3f}" if reading.fall <= 0 else f"fell by only {reading.fall:.3f}"
        self.warning = (f"guard: step {reading.step}: verified accuracy ({self.signal_name()}) fell from {reading.peak:.3f} "
                        f"(step {reading.peak_step}) to {reading.verified:.3f} while the reward {change}"
                        + (" (on its range so far)" if self.watch.detector.off_scale() else "")
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
        """The policy written whole into .best-STEP/ (every process takes part: a sharded policy is gathered
        collectively), then swapped in as best/ by one rename (`replace_best`)."""
        from coreward.grpo.checkpoints import mark_complete

        trainer, written = self.trainer, self.run_dir / f"{BEST_PREFIX}{reading.step}"
        main = trainer.accelerator.is_main_process
        if main and written.exists():
            shutil.rmtree(written)  # the leftover of a write killed at this step
        trainer.accelerator.wait_for_everyone()
        trainer.save_model(str(written))
        if main:
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(str(written))
            info = {"step": reading.step, "verified": reading.verified, "reward": reading.reward,
                    "source": self.source, "smooth": self.settings.smooth}
            (written / BEST_INFO).write_text(json.dumps(info, indent=1) + "\n")
            mark_complete(written)
            replace_best(self.run_dir, written)
        trainer.accelerator.wait_for_everyone()
        self.best_written = reading.verified

    def signal_name(self) -> str:
        """What the guard calls verified accuracy, with its smoothing: the report, the plots and the progress bar show
        other smoothings of the same accuracy, each labelled."""
        smooth = self.watch.detector.smooth
        return f"{self.source}, " + (f"EMA {smooth}" if smooth else "unsmoothed")

    def summary(self) -> dict[str, Any]:
        detector = self.watch.detector
        best = read_best(self.run_dir)
        line = (f"guard: fired at step {detector.fired_at}" if detector.fired_at is not None
                else "guard: no overoptimization detected")
        if detector.peak is not None:
            line += f"; verified accuracy ({self.signal_name()}) peaked at {detector.peak:.3f} (step {detector.peak_step})"
        if best:
            line += f"; best/ holds step {best['step']}"
        return {"settings": asdict(self.settings), "source": self.source, "fired_at": detector.fired_at,
                "stopped_at": self.stopped_at, "peak": detector.peak, "peak_step": detector.peak_step,
                "best": best, "warning": self.warning, "line": line}

    def on_train_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        report = self.summary()
        atomic_write_text(self.run_dir / GUARD_FILE, json.dumps(report, indent=1) + "\n")
        print_once(report["line"])


# ------------------------------------------------------------------------------------------- best/ on disk
def read_best(run_dir: str | Path) -> dict[str, Any] | None:
    """best/'s record (step, verified accuracy, ...), None when the run has no complete best/.

    The link is resolved once and both files are read from its target: a path through best/ is resolved again by
    every system call, and one that began before `replace_best` renamed the link can reach the old target after it
    was deleted. A target that vanished while being read was replaced: the new one is read."""
    best = Path(run_dir) / BEST_DIR
    for _ in range(100):
        target = _best_target(best)
        try:
            if (target / COMPLETE_MARKER).is_file():
                return json.loads((target / BEST_INFO).read_text())
        except FileNotFoundError:
            pass
        if _best_target(best) == target:  # not replaced meanwhile: what was read is what there is
            return None
    return None


def _best_target(best: Path) -> Path:
    """The directory best/ names now: its link's target, or best/ itself (an older coreward's directory, or none)."""
    try:
        return best.parent / os.readlink(best)
    except OSError:  # not a link, or no best/
        return best


def replace_best(run_dir: Path, written: Path) -> None:
    """Make best/ the complete directory `written` by one atomic rename: a new link to it, renamed over best/."""
    best, link = run_dir / BEST_DIR, run_dir / LINK_STAGING
    old = best.resolve() if best.is_symlink() else None
    link.unlink(missing_ok=True)
    os.symlink(written.name, link)  # relative: the run directory can be moved or copied whole
    os.replace(link, best)
    _fsync_directory(run_dir)
    if old is not None and old != written.resolve():
        shutil.rmtree(old, ignore_errors=True)


def remove_best(run_dir: Path) -> None:
    """No best/ any more (the link goes first, at once; then what it pointed to)."""
    best = Path(run_dir) / BEST_DIR
    if best.is_symlink():
        target = best.resolve()
        best.unlink()
        shutil.rmtree(target, ignore_errors=True)
    elif best.exists():
        shutil.rmtree(best)


def recover_best(run_dir: str | Path) -> None:
    """Before a run starts (main process): the leftovers of a write killed before its rename go (a .best-STEP/ that
    best/ does not point to, a staged link), and a best/ directory of an older coreward becomes a link."""
    run_dir = Path(run_dir)
    best = run_dir / BEST_DIR
    if best.is_dir() and not best.is_symlink():  # written whole in place by an older coreward
        legacy = run_dir / f"{BEST_PREFIX}legacy"
        os.replace(best, legacy)
        replace_best(run_dir, legacy)
    (run_dir / LINK_STAGING).unlink(missing_ok=True)
    shutil.rmtree(run_dir / (BEST_DIR + ".new"), ignore_errors=True)  # an older coreward's staging directory
    current = best.resolve() if best.is_symlink() else None
    for leftover in run_dir.glob(f"{BEST_PREFIX}*"):
        if leftover.resolve() != current:
            shutil.rmtree(leftover, ignore_errors=True)


def _fsync_directory(directory: Path) -> None:
    """The rename is on disk (a power cut after it keeps the new best/)."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def add_guard(trainer: Any, settings: GuardSettings, run_dir: str | Path, tokenizer: Any = None,
              eval_records: list | None = None, eval_n: int = 4, eval_name: str = "") -> GuardCallback | None:
    """The guard as the trainer's first callback (its `guard/*` values reach every logger); None when disabled or
    when the run has no verified signal to watch (it says so). `eval_records`: the held-out set evaluated during
    training, if any."""
    if not settings.enabled:
        return None
    source, line = guard_signal(trainer, eval_records, eval_n, eval_name)
    print_once(line)
    if source is None:
        return None
    if trainer.accelerator.is_main_process:
        recover_best(run_dir)
    guard = GuardCallback(settings, run_dir, trainer, tokenizer, source)
    trainer.callback_handler.callbacks.insert(0, guard)
    return guard
