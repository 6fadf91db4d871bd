"""Freed tensors given back to the operating system on a CPU run: glibc's mmap threshold held fixed.

glibc serves an allocation above its mmap threshold (128 KiB at the start) from a mapping of its own, unmapped when
freed; but each such free raises the threshold to the freed block's size (up to 32 MiB), after which blocks of that
size come from the heap, whose freed space the process keeps and cannot always reuse (a block of another size, a
thread's other arena). On a real model's CPU step this is most of what the resident set holds beyond the tensors
alive at its peak, the memory plan's count (docs/memory.md, "Measured accuracy"): SmolLM2-135M, 3 steps of
configs/smol/majority.yaml alone on 2 cores, peak RSS 5.5 GiB (1.50x the plan's 3.7 without the heap) with glibc's
default, 4.4 GiB (1.18x) with the threshold held at 1 MiB, 5.7 GiB at 8 MiB (its retained blocks are 1-8 MiB: a
layer's activations). A block above the threshold is mapped afresh each time it is allocated (page faults), which is the
price: 267 s against 224 s for the 3 steps (+19%; the updates +26%). So glibc's default stays the default
(`host_mmap_threshold: 0`), and a CPU plan counts what the heap keeps (grpo/plan/step.py, `heap_kept`: one more copy
of a LoRA policy's saved activations; a full fine-tune's heap gives its blocks back to its next pass).

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
