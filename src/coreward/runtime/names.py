"""The nearest known name to a mistyped one, for every "unknown ..." error: a method, a config key, a GRPOConfig
option, a benchmark, a registered model (click suggests the command line's options itself)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


CUTOFF = 0.75  # difflib's similarity ratio a known name needs to be offered (a letter or two off in a short name)


def nearest(name: str, known: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The known name closest to `name` (case aside), or None where none is close. A name that is the start of
    exactly one known name (`smollm2-135m` of `smollm2-135m-instruct`) is close however much it leaves out."""
    lowered = {k.lower(): k for k in known}
    name = str(name).lower()
    found = difflib.get_close_matches(name, list(lowered), n=1, cutoff=cutoff)
    if found:
        return lowered[found[0]]
    starts = [k for k in lowered if len(name) >= 4 and k.startswith(name)]
    return lowered[starts[0]] if len(starts) == 1 else None


def did_you_mean(names: str | Iterable[str], known: Iterable[str], prefix: str = "") -> str:
    """"; did you mean X?" (or "X, Y" for several names) naming the nearest known name of each, `prefix` before it
    (a section's key), or "" where none is close: to append to an error."""
    known = list(known)
    close = [nearest(n, known) for n in ([names] if isinstance(names, str) else names)]
    close = [prefix + c for c in close if c]
    return f"; did you mean {', '.join(close)}?" if close else ""
