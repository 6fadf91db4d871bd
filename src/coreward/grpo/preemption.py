"""Preemption: a scheduler's signal ends the run cleanly at the end of the step in progress.

Clusters send SIGTERM before they kill a job (SLURM can send SIGUSR1 ahead of a time limit). On one of
`preempt_signals` the handler only sets a flag; at the end of the current optimizer step every process learns
of it (a max all-reduce, so a signal to any one process stops them all at the same step), TRL writes a complete
checkpoint of that step (reward-source state included, see `CorewardGRPOTrainer._save_checkpoint`), and
training stops. `coreward train` then exits with status `PREEMPTED_EXIT` (75, EX_TEMPFAIL: "try again"), and
`--resume` continues from that checkpoint with no step lost.

Ctrl-C (SIGINT) does the same at a terminal, whenever preemption is on: the first one says what will happen and
stops after the step in progress, with its checkpoint; a second one stops at once (KeyboardInterrupt, exit 130),
losing the steps since the newest complete checkpoint.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

from transformers import TrainerCallback

from coreward.runtime.distributed import print_once
from coreward.runtime.interrupt import count_ctrl_c


PREEMPTED_EXIT = 75


def signal_numbers(names: list[str]) -> list[int]:
    """`["SIGTERM", "USR1"]` -> their numbers; a name that is no signal raises ValueError naming it."""
    numbers = []
    for name in names:
        full = name.upper() if name.upper().startswith("SIG") else f"SIG{name.upper()}"
        if not hasattr(signal, full) or full in ("SIGKILL", "SIGSTOP"):
            raise ValueError(f"{name!r} is not a signal a run can catch (e.g. SIGTERM, SIGUSR1)")
        numbers.append(int(getattr(signal, full)))
    return numbers


class PreemptionCallback(TrainerCallback):
    """Catches the signals during training and turns the first one into save-and-stop at the step's end."""

    def __init__(self, signals: list[int]):
        # Ctrl-C too, unless preemption is off (`preempt_signals: []`): then it interrupts at once, as Python's does
        self.signals = [*signals, signal.SIGINT] if signals and signal.SIGINT not in signals else list(signals)
        self.received: int | None = None
        self.preempted_at: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, number: int, frame: Any) -> None:
        if number == signal.SIGINT:
            count_ctrl_c()  # the closing line says which Ctrl-C stopped the run (grpo/cli.py)
        if number == signal.SIGINT and self.received == signal.SIGINT:  # the second Ctrl-C: stop now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        if self.received is None:
            self.received = number
            if number == signal.SIGINT:
                print_once("Ctrl-C: stopping after the current step, with a complete checkpoint "
                           "(press Ctrl-C again to stop at once and lose the steps since the last checkpoint)")
                sys.stdout.flush()

    @property
    def stopped_by(self) -> str:
        """How the run was stopped, for the closing message: "Ctrl-C" or "a preemption signal (SIGTERM)"."""
        if self.received == signal.SIGINT:
            return "Ctrl-C"
        return f"a preemption signal ({signal.Signals(self.received).name})" if self.received else "a preemption signal"

    def on_train_begin(self, args, state, control, **kwargs):
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for number in self.signals:
                self._previous[number] = signal.signal(number, self._handle)

    def on_step_end(self, args, state, control, **kwargs):
        if self._anyone_received():
            control.should_save = True
            control.should_training_stop = True
            self.preempted_at = state.global_step
            print_once(f"preempted: checkpoint of step {state.global_step} is being written; "
                       "continue with --resume")
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.restore()

    def restore(self) -> None:
        """The handlers the process had before the run, back (also after a run that raised: no on_train_end then)."""
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def _anyone_received(self) -> bool:
        import torch
        import torch.distributed as dist

        flag = 1.0 if self.received is not None else 0.0
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            backend = dist.get_backend()
            tensor = torch.tensor([flag], device="cuda" if backend == "nccl" else "cpu")
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
            flag = float(tensor.item())
        return flag > 0
