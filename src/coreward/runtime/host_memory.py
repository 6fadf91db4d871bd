"""Host memory: how much this machine has (psutil, the one place coreward reads it), and freed tensors given back to
the operating system on a CPU run by holding glibc's mmap threshold fixed.

glibc serves an allocation above its mmap threshold from a mapping of its own, unmapped when freed; but each such
free raises the threshold to the freed block's size (up to 32 MiB), after which blocks of that size come from the
heap, whose freed space the process keeps and cannot always reuse. On a real model's CPU step that is most of what
the resident set holds beyond the tensors alive at its peak. Holding the threshold lowers the peak but maps a block
afresh each time it is allocated (page faults), which slows the step (docs/results.md, Mem3, has both
figures). So glibc's default stays the default (`host_mmap_threshold: 0`), and a CPU plan counts what the heap
keeps (grpo/plan/step.py, `heap_kept`).

`hold_mmap_threshold` holds it (mallopt(M_MMAP_THRESHOLD) also turns the dynamic growth off); the environment's
MALLOC_MMAP_THRESHOLD_, which glibc reads at start, is left to decide where set. Not glibc (macOS, musl): nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os


M_MMAP_THRESHOLD = -3  # glibc's malloc.h
ENVIRONMENT = "MALLOC_MMAP_THRESHOLD_"


def hold_mmap_threshold(threshold: int | None) -> str | None:
    """Hold glibc's mmap threshold at `threshold` bytes (None or 0: leave glibc's default). Returns the run log's
    line, or None where there is nothing to say (not asked, or not glibc)."""
    if os.environ.get(ENVIRONMENT):
        return f"host memory: glibc's mmap threshold {os.environ[ENVIRONMENT]} bytes ({ENVIRONMENT}, the environment's)"
    if not threshold:
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version"):  # glibc's own: absent from musl and macOS
        return None
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, int(threshold)) != 1:  # refused: above glibc's maximum (32 MiB on 64 bits)
        return None
    return (f"host memory: glibc's mmap threshold held at {format_size(threshold)}: freed tensors above it go back to "
            "the system (host_mmap_threshold; 0 keeps glibc's default)")


def format_size(size: int) -> str:
    return f"{size // (1 << 20)} MiB" if size % (1 << 20) == 0 else f"{size // 1024} KiB"


def total_memory() -> int:
    """This machine's RAM in bytes (MemTotal on Linux)."""
    import psutil

    return int(psutil.virtual_memory().total)


def available_memory() -> int | None:
    """The RAM new processes can take now without swapping, in bytes (MemAvailable on Linux); None where the
    system does not say."""
    import psutil

    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError, AttributeError):
        return None
