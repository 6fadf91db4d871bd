"""Progress of a long loop where the user can read it: tqdm's bar on a terminal; anywhere else (a log file, a pipe, a
cluster job's output) a line every `every_s` seconds with the time left, because a bar redrawn into a file is one
ever-growing line of carriage returns there (`tail` shows its last state only when the bar closes)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable


def is_terminal(stream) -> bool:
    """A terminal a bar can be drawn on: a tty with a width (tqdm draws nothing on a pseudo-terminal of 0 columns,
    as a container started with `-t` and no size has)."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):  # replaced by something without a descriptor, or closed
        return False


class Progress:
    """Units of work toward a known `total`, reported on stderr as they are done: tqdm's bar on a terminal, else
    `desc: 3/40 (1m05s, about 13m left)` at most every `every_s` seconds and once at the end, the time left being the
    time per unit so far times the units left. `describe`, when given, says what was done in the caller's words: it
    replaces `3/40` in a line and is the bar's postfix (redrawn at most every second), called only when drawn.
    `timing`, when given, words the rate and the time left from the seconds elapsed, in the caller's units (what the
    user counts, which the units of work may not be). Nothing when not `enabled`."""

    def __init__(self, total: int, desc: str, enabled: bool = True, every_s: float = 30.0, unit: str = "it",
                 describe: Callable[[], str] | None = None, timing: Callable[[float], str] | None = None):
        self.total, self.desc, self.enabled, self.every_s, self.describe = total, desc, enabled, every_s, describe
        self.timing = timing
        self.done = 0
        self.bar = None
        if enabled and is_terminal(sys.stderr):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit)
        self.start = self.last = time.monotonic()

    def advance(self, units: int = 1) -> None:
        self.done += units
        if not self.enabled:
            return
        now = time.monotonic()
        if self.bar is not None:
            self.bar.update(units)
            if self.describe is not None and now - self.last >= 1.0:  # often enough to read, not at every unit
                self.last = now
                self.bar.set_postfix_str(self.postfix(now - self.start))
            return
        if self.done >= self.total or now - self.last >= self.every_s:
            self.last = now
            elapsed = now - self.start
            if self.timing is not None:
                left = f", {self.timing(elapsed)}"
            else:
                left = (f", about {duration(elapsed / max(self.done, 1) * (self.total - self.done))} left"
                        if self.done < self.total else "")
            done = self.describe() if self.describe is not None else f"{self.done}/{self.total}"
            print(f"{self.desc}: {done} ({duration(elapsed)}{left})", file=sys.stderr, flush=True)

    def postfix(self, elapsed: float) -> str:
        return self.describe() + (f" ({self.timing(elapsed)})" if self.timing is not None else "")

    def close(self) -> None:
        if self.bar is not None:
            if self.describe is not None:  # the bar's last state says it all
                self.bar.set_postfix_str(self.postfix(time.monotonic() - self.start), refresh=False)
            self.bar.close()


def rate(count: float, seconds: float, unit: str) -> str:
    """`count` `unit`s in `seconds` as a rate a person reads: "3.2 completions/s", or below one a second "41 s per
    completion" (where "0.0/s" would say nothing)."""
    if count <= 0 or seconds <= 0:
        return f"no {unit} yet"
    per_s = count / seconds
    if per_s >= 1:
        return f"{per_s:.1f} {unit}s/s"
    each = seconds / count
    return f"{each:.0f} s per {unit}" if each < 60 else f"{duration(each)} per {unit}"


def duration(seconds: float) -> str:
    """1m05s, 2h03m."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
