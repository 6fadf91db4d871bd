"""Ctrl-C in coreward's commands, however it is sent: the terminal's Ctrl-C (SIGINT to the process group), `kill -INT
PID`, `timeout -s INT`. Every command stops on the first one with a line saying what it stopped and how to continue
(runtime/commands.py), not a traceback; a training run stops after its step instead (grpo/preemption.py), and only a
second one stops it at once. Each SIGINT is counted here, so that the closing line says which one it was.

Python turns SIGINT into KeyboardInterrupt only when the process did not start with SIGINT ignored, and a shell
script starts its background jobs (`coreward train ... &`) with SIGINT ignored: `catch_ctrl_c` installs the handler
whatever the process inherited, so `kill -INT` stops such a run too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


_received = 0


def ctrl_c_count() -> int:
    """How many SIGINTs this process has received since `catch_ctrl_c` (or any handler that counts them)."""
    return _received


def count_ctrl_c() -> None:
    """Count one SIGINT (the training's own handler calls this too)."""
    global _received
    _received += 1


def _raise_keyboard_interrupt(number: int, frame: object) -> None:
    count_ctrl_c()
    raise KeyboardInterrupt


def catch_ctrl_c() -> None:
    """SIGINT raises KeyboardInterrupt in this process (counted), even where it started with SIGINT ignored. Only the
    main thread can set a handler; elsewhere nothing changes."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _raise_keyboard_interrupt)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a long phase: `what` it stopped (a gerund phrase) and `how` to continue (what it kept)."""

    def __init__(self, what: str, how: str):
        super().__init__(what)
        self.what, self.how = what, how

    def line(self) -> str:
        return f"stopped by Ctrl-C while {self.what}; {self.how}"


@contextmanager
def long_phase(what: str, how: str) -> Iterator[None]:
    """A Ctrl-C inside becomes `Interrupted(what, how)` (the innermost phase's words win: it knows best what it
    kept)."""
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted(what, how) from None
