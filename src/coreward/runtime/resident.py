"""This process's resident memory as Linux reports it (/proc/self/status), and its high-water mark reset on demand:
how the benchmarks and tests measure the peak of one phase on a CPU (the memory plan's checks, docs/explanation/memory-model.md).

Reset with `reset_peak` (VmHWM := VmRSS, through /proc/self/clear_refs) just before a phase, read VmHWM after it.
glibc may keep memory a previous phase freed and hand it out again unseen: measure each variant in a process of its
own, or fix the mmap threshold (`mallopt(M_MMAP_THRESHOLD)`) so large tensors are mapped and unmapped.
"""

from __future__ import annotations

from collections.abc import Callable


FIELDS = ("VmRSS:", "VmHWM:", "RssAnon:", "RssFile:")


def status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process, in bytes (keys as /proc writes them, colon included)."""
    values = {}
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(FIELDS):
                key, kib, _ = line.split()
                values[key] = int(kib) * 1024
    return values


def resident() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process, bytes."""
    values = status()
    return values["VmRSS:"], values["VmHWM:"]


def reset_peak() -> None:
    """VmHWM := VmRSS: the next reading of the high-water mark is the peak since now."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


def peak_of(call: Callable[[], object]) -> int:
    """Bytes `call()` raised the resident high-water mark above the resident memory it started at."""
    reset_peak()
    start, _ = resident()
    call()
    return resident()[1] - start
