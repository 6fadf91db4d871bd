"""`metrics.jsonl`: one JSON object per optimizer step, with `step`, never duplicated or missing.

HF's Trainer calls `on_log` several times around a step (training metrics, then evaluation metrics,
then a run summary at the end). We merge everything logged for one step into one row and write the
row when the step is over. On resume, rows after the checkpoint's step are dropped first, so a killed
and resumed run has each step exactly once.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.integrations import TensorBoardCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from coreward.runtime.files import atomic_write_text


# keys of HF's end-of-run summary, kept out of the per-step rows (written to summary.json instead)
SUMMARY_KEYS = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos"}


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl file (a torn last line, from a kill mid-write, is ignored)."""
    rows = []
    path = Path(path)
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def truncate_after(path: Path, step: int) -> list[dict[str, Any]]:
    """Keep rows with step <= `step` (and drop a torn line), rewriting the file atomically; the rows kept."""
    rows = [row for row in read_metrics(path) if row.get("step", 0) <= step]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    return rows


def process_cpu_seconds() -> float:
    """CPU seconds (user + system, every thread) this process and its child processes (verifier workers, a
    forkserver; living or ended) have used since it started: what a run cost in compute, where wall time depends
    on what else shared the machine. The main process's only, not other ranks'."""
    import resource

    import psutil

    used = sum(usage.ru_utime + usage.ru_stime
               for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            # with what the child's own ended children used (a forkserver's verifier workers): that time is in no
            # RUSAGE of ours, and leaving it out made the count fall back when such a worker ended
            used += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:  # ended while being read: counted in RUSAGE_CHILDREN once reaped, or lost (seconds)
            continue
    return round(used, 3)


class MetricsFileCallback(TrainerCallback):
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.row: dict[str, Any] | None = None
        # what the steps kept from earlier attempts had cost (a resumed run's count goes on from its checkpoint's
        # row, so a comparison at equal compute reads the whole run's cost, not its last attempt's)
        self.cpu_offset = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                kept = [row["process_cpu_s"] for row in truncate_after(self.path, state.global_step)
                        if isinstance(row.get("process_cpu_s"), (int, float))]
                self.cpu_offset = float(kept[-1]) if kept and state.global_step > 0 else 0.0

    def cpu_seconds(self) -> float:
        """The run's CPU-seconds so far: this attempt's processes plus what its kept steps had cost before."""
        return round(self.cpu_offset + process_cpu_seconds(), 3)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if SUMMARY_KEYS & set(logs):  # the end-of-run summary: its own file, not a second row for the step
            with open(self.run_dir / "summary.json", "w") as handle:
                json.dump({**{k: _clean(v) for k, v in logs.items()}, "process_cpu_s": self.cpu_seconds()},
                          handle, indent=2)
            return
        values = {k: _clean(v) for k, v in logs.items()}
        if self.row is not None and self.row["step"] != state.global_step:
            self.flush()
        if self.row is None:
            self.row = {"step": state.global_step}
        self.row.update(values)

    def log_extra(self, step: int, values: dict[str, Any]) -> None:
        """Merge metrics computed outside HF's logging (e.g. held-out evaluation) into a step's row."""
        if self.row is not None and self.row["step"] != step:
            self.flush()
        if self.row is None:
            self.row = {"step": step}
        self.row.update({k: _clean(v) for k, v in values.items()})

    def flush(self) -> None:
        if self.row is None:
            return
        # what the run had cost when its step (and any evaluation logged with it) was done: a comparison at equal
        # compute picks its checkpoints by this (the main process's count, with a resumed run's earlier attempts')
        self.row.setdefault("process_cpu_s", self.cpu_seconds())
        with open(self.path, "a") as handle:
            handle.write(json.dumps(self.row) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.row = None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.flush()


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# what the progress bar shows after each step; everything else is in metrics.jsonl and TensorBoard
PROGRESS_KEYS = {"reward": "reward", "verified_accuracy": "verified", "completions/mean_length": "len"}
EVAL_PREFIX = "eval/avg@"  # the held-out score is logged as eval/avg@N, N the samples per problem


class CompactProgressCallback(ProgressCallback):
    """HF's progress bar, with a few numbers as its postfix instead of a dict dumped per step. The latest
    held-out score stays in the postfix until the next evaluation (it is logged apart from the step's metrics).

    The bar moves to step N when step N's metrics arrive, so it never shows N beside the values of N − 1 (HF moves
    it at the step's end, before the step is logged and before an evaluation that can take a while). While it is on
    screen, lines printed to stdout (warnings, the guard's line) go above it, each on a line of its own."""

    def __init__(self):
        super().__init__()
        self.postfix: dict[str, str] = {}
        self._stdout: Any = None

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        if self.training_bar is not None:
            import sys

            self._stdout = sys.stdout
            sys.stdout = LinesAboveTheBar(sys.stdout, self.training_bar)

    def on_step_end(self, args, state, control, **kwargs):
        if not control.should_log:  # a step that logs nothing moves the bar now; one that logs, with its values
            self._advance(state)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            shown = {label: f"{logs[key]:.3g}" for key, label in PROGRESS_KEYS.items() if isinstance(logs.get(key), float)}
            evals = [value for key, value in logs.items() if key.startswith(EVAL_PREFIX) and isinstance(value, float)]
            if evals:  # the bar has room for one evaluation figure: the last logged
                shown["eval"] = f"{evals[-1]:.3g}"
            if shown:
                self.postfix.update(shown)
                self.training_bar.set_postfix(self.postfix, refresh=False)
            if "reward" in logs:  # the step's training metrics: the bar shows that step with them
                self._advance(state)
            self.training_bar.refresh()

    def on_train_end(self, args, state, control, **kwargs):
        self._advance(state)
        self.close()

    def _advance(self, state) -> None:
        if state.is_world_process_zero and self.training_bar is not None and state.global_step > self.current_step:
            self.training_bar.update(state.global_step - self.current_step)
            self.current_step = state.global_step

    def close(self) -> None:
        """Close the bar (it stays on screen, ended by a newline) and give stdout back."""
        import sys

        if self.training_bar is not None:
            self.training_bar.close()
            self.training_bar = None
        if self._stdout is not None:
            if isinstance(sys.stdout, LinesAboveTheBar):
                sys.stdout = self._stdout
            self._stdout = None


class LinesAboveTheBar:
    """sys.stdout while a progress bar is drawn on stderr: on a terminal the two share a line, and a printed line
    would be glued to the bar's end. Each complete line is written with the bar cleared, then the bar is redrawn
    below it (tqdm's `write`, for every print)."""

    def __init__(self, stream, bar):
        self.stream, self.bar, self.pending = stream, bar, ""

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            lines, _, self.pending = self.pending.rpartition("\n")
            with self.bar.get_lock():
                self.bar.clear(nolock=True)
                self.stream.write(lines + "\n")
                self.stream.flush()
                self.bar.refresh(nolock=True)
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's
        return getattr(self.stream, name)


class StepLinesCallback(TrainerCallback):
    """With `grpo.disable_tqdm` (a log file, a notebook, the demo): one short line per logged step, the numbers of
    the progress bar's postfix, instead of HF's dict of every metric (those are in metrics.jsonl)."""

    def __init__(self, prefix: str = "  "):
        self.prefix = prefix
        self.started: float | None = None
        self.last: tuple[int, float] | None = None  # the step and time of the last line

    def on_train_begin(self, args, state, control, **kwargs):
        import time

        self.started = time.perf_counter()
        self.last = (state.global_step, self.started)  # a resumed run's first line times its own steps

    def on_log(self, args, state, control, logs=None, **kwargs):
        import time

        if not state.is_world_process_zero or not logs:
            return
        shown = [f"{label} {logs[key]:.3g}" for key, label in PROGRESS_KEYS.items() if isinstance(logs.get(key), float)]
        shown += [f"held-out {key[len(EVAL_PREFIX) - 1:]} {value:.3g}" for key, value in logs.items()
                  if key.startswith(EVAL_PREFIX) and isinstance(value, float)]
        if shown:
            # the step's own time apart from the run's total: "(37 s)" alone read as the step's
            now = time.perf_counter()
            elapsed = now - (self.started or now)
            last_step, last_time = self.last or (state.global_step - 1, self.started or now)
            steps = state.global_step - last_step
            own = (f"step {now - last_time:.0f} s" if steps == 1 else f"{steps} steps {now - last_time:.0f} s"
                   if steps > 1 else "")  # 0: a second line for one step (a periodic evaluation's)
            self.last = (state.global_step, now)
            timing = f"{own}, total {elapsed:.0f} s" if own else f"total {elapsed:.0f} s"
            print(f"{self.prefix}step {state.global_step}/{state.max_steps}: {', '.join(shown)} ({timing})",
                  flush=True)


def use_compact_progress(trainer) -> None:
    """HF's progress output made short: the bar with a few numbers, or (tqdm disabled) one line per step."""
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(CompactProgressCallback())
    elif trainer.pop_callback(PrinterCallback) is not None:
        trainer.add_callback(StepLinesCallback())


def close_progress(trainer) -> None:
    """Close the progress bar of a run that stopped on an error (HF closes it only at a normal end), so what is
    printed next starts on a line of its own, and stdout is the process's again."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, CompactProgressCallback):
            callback.close()
        elif isinstance(callback, ProgressCallback) and callback.training_bar is not None:
            callback.training_bar.close()
            callback.training_bar = None


class RunTensorBoardCallback(TensorBoardCallback):
    """HF's TensorBoard logging, pinned to one run's directory and safe to resume.

    HF takes the directory from the process-wide `TENSORBOARD_LOGGING_DIR`, so several runs in one process
    (the demo) would all write into the first run's. And a resumed run would log the steps after its
    checkpoint a second time: `purge_step` (TensorBoard's own restart marker) hides the events at or past
    the first step the resumed run logs, as metrics.jsonl drops its rows past the checkpoint.
    """

    def __init__(self, logging_dir: str | Path, purge_step: int | None = None):
        super().__init__()
        self.logging_dir = str(logging_dir)
        self.purge_step = purge_step

    def _init_summary_writer(self, args):
        self.tb_writer = self._SummaryWriter(log_dir=self.logging_dir, purge_step=self.purge_step)


def use_run_tensorboard(trainer, logging_dir: str | Path, resumed_step: int | None) -> None:
    """Swap HF's TensorBoard callback (present when `report_to` names tensorboard) for `RunTensorBoardCallback`."""
    if trainer.pop_callback(TensorBoardCallback) is not None:
        purge_step = resumed_step + 1 if resumed_step is not None else None
        trainer.add_callback(RunTensorBoardCallback(logging_dir, purge_step))
