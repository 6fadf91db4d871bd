"""What this machine can do, measured: its matmul rate and memory bandwidth, and a timer and FLOP counter to hold a
phase against them (the benchmarks of a real model's step read these: benchmarks/speed/real_model_rollouts.py)."""

from __future__ import annotations

import time
from typing import Any, Callable


def timed(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Mean seconds of `fn` over `repeat` calls, after one warm-up call (first-call allocations, oneDNN's kernel
    choice)."""
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def counted(fn: Callable[[], Any]) -> int:
    """The floating-point operations of one call of `fn`, as torch.utils.flop_counter counts them (matmuls,
    attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def matmul_rate(dtype: Any, size: int = 2048) -> float:
    """GFLOP/s of a `size`³ matmul in `dtype` on torch's current threads."""
    import torch

    a = torch.randn(size, size, dtype=dtype)
    return 2 * size**3 / timed(lambda: a @ a, repeat=5) / 1e9


def memory_bandwidth() -> tuple[float, float]:
    """GB/s reading (a sum) and copying (read + write) a 1 GiB float32 tensor: far past the caches."""
    import torch

    a = torch.ones(256 * 1024 * 1024)
    b = torch.empty_like(a)
    nbytes = a.numel() * a.element_size()
    read = nbytes / timed(lambda: a.sum(), repeat=5) / 1e9
    copy = 2 * nbytes / timed(lambda: b.copy_(a), repeat=5) / 1e9
    return read, copy
