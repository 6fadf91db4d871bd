"""Progress of a long loop where the user can read it: tqdm's bar on a terminal; anywhere else (a log file, a pipe, a
cluster job's output) a line every `every_s` seconds with the time left, because a bar redrawn into a file is one
ever-growing line of carriage returns there (`tail` shows its last state only when the bar closes)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TypeVar


T = TypeVar("T")


def is_terminal(stream) -> bool:
    """A terminal a bar can be drawn on: a tty with a width (tqdm draws nothing on a pseudo-terminal of 0 columns,
    as a container started with `-t` and no size has)."""
    try:
        return stream.isatty() and os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):  # replaced by something without a descriptor, or closed
        return False


def progress(items: Sequence[T], desc: str, enabled: bool = True, every_s: float = 30.0) -> Iterator[T]:
    """`items`, reporting progress on stderr: tqdm's bar on a terminal, else `desc: 3/40 (1m05s, about 13m left)`
    at most every `every_s` seconds and once at the end. Nothing when not `enabled`."""
    if not enabled:
        yield from items
        return
    total = len(items)
    if is_terminal(sys.stderr):
        from tqdm.auto import tqdm

        yield from tqdm(items, desc=desc, total=total)
        return
    start = last = time.monotonic()
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.monotonic()
        if done == total or now - last >= every_s:
            last = now
            elapsed = now - start
            left = f", about {duration(elapsed / done * (total - done))} left" if done < total else ""
            print(f"{desc}: {done}/{total} ({duration(elapsed)}{left})", file=sys.stderr, flush=True)


def duration(seconds: float) -> str:
    """1m05s, 2h03m."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
