"""Devices, dtypes, CPU threads and tokenizer setup: the one place each is decided."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from coreward.runtime.errors import CorewardError


def resolve_device(device: Any = "auto") -> Any:
    """"auto" (or None): the GPU when there is one, else the CPU; anything else as given (a torch.device)."""
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def bf16_available() -> bool:
    """Whether this process can train in bfloat16: a CUDA GPU that supports it (CPU bf16 matmuls are slow)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def resolve_dtype(dtype: str, device: Any = "auto"):
    """`auto` = bf16 on a GPU that supports it, fp32 otherwise (CPU bf16 matmuls are slow and lossy)."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if resolve_device(device).type == "cuda" and bf16_available() else torch.float32
    choices = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in choices:
        raise CorewardError(f"unknown dtype {dtype!r}; use auto, {', '.join(choices)}")
    return choices[dtype]


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block on `count` torch CPU threads (None or 0: leave as is), then restore the previous count.

    A tiny model's matrices are too small to split across threads, and on cores shared with other jobs the
    threads mostly wait for each other (docs/figures.md, Speed: "torch's default threads (2) over one thread").
    """
    import torch

    previous = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; all of the machine's where there is none)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cpu_times(stat: str = "/proc/stat") -> tuple[int, int]:
    """(idle + iowait, all) clock ticks of the machine's CPUs since boot, from the first line of /proc/stat."""
    with open(stat) as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])  # guest time is already counted in user time


def idle_share(first: tuple[int, int], second: tuple[int, int], machine_cores: int, usable: int) -> float | None:
    """Idle cores between two `cpu_times` samples: the machine's idle share times its cores, at most the cores this
    process may use (None when no time passed)."""
    idle, total = second[0] - first[0], second[1] - first[1]
    return None if total <= 0 else min(usable, machine_cores * idle / total)


def idle_cores(seconds: float = 0.25) -> float | None:
    """How many of this process's cores sat idle over the next `seconds` (None where there is no /proc/stat): the
    cores other jobs leave free, since this process sleeps meanwhile."""
    import os
    import time

    try:
        first = cpu_times()
        time.sleep(seconds)
        second = cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    return idle_share(first, second, os.cpu_count() or 1, usable_cores())


def pick_torch_threads(parameters: int, device_type: str, idle: float | None, processes: int = 1
                       ) -> tuple[int | None, str]:
    """The torch CPU threads for a run whose config leaves `torch_threads` unset, and why, for the run log.

    On the CPU: the cores other jobs leave idle, shared among this machine's processes of the run, at least 1 and at
    most torch's default: on idle cores more threads are faster at every model size, while threads that share a busy
    core wait on each other, most of all on a small model whose matrices are too small to split
    (`python -m benchmarks.speed.threads_by_size`, docs/figures.md "torch threads"). So the free cores decide, at any size;
    the size only says how much a wrong choice costs. On a GPU torch's default is left alone (the CPU
    threads only feed it). None: leave torch's default as it is."""
    import torch

    default = torch.get_num_threads()
    size = f"{parameters / 1e6:.1f}M" if parameters < 1e9 else f"{parameters / 1e9:.2f}B"
    if device_type != "cpu":
        return None, f"torch's default, {default}: the model runs on {device_type}"
    if idle is None:
        return None, f"torch's default, {default}: the idle cores could not be read (no /proc/stat)"
    threads = max(1, min(default, int(idle / max(1, processes) + 0.5)))
    share = f", shared by {processes} processes" if processes > 1 else ""
    return threads, (f"a {size}-parameter model on the CPU, {idle:.1f} core(s) idle at the start{share}; torch's "
                     f"default is {default}")


def prepare_tokenizer(tokenizer: Any, padding_side: str = "left") -> Any:
    """A pad token (the eos token when the tokenizer has none) and the padding side; returns the tokenizer.

    Generation pads on the left (it appends on the right); a reward model pads on the right.
    """
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_tokenizer(path: str, trust_remote_code: bool = False, key: str = "model", padding_side: str = "left"):
    """`AutoTokenizer.from_pretrained` with `prepare_tokenizer`; a failure names the setting and the path."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise CorewardError(f"{key}: cannot load a tokenizer from {path}: {err}") from None
    return prepare_tokenizer(tokenizer, padding_side)


@contextmanager
def whole_model_loading() -> Iterator[None]:
    """Inside a DeepSpeed ZeRO-3 run, transformers' `from_pretrained` partitions every model it builds
    (`zero.Init`); a model coreward holds itself (Cooper's RM, trained by its own optimizer) must stay whole
    on each process. This hides the run's DeepSpeed config from transformers for the block."""
    try:
        from transformers.integrations import deepspeed as hf_deepspeed
    except ImportError:  # pragma: no cover - transformers always has it
        yield
        return
    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


def cpu_only_torch() -> bool:
    """torch is imported and is a build without CUDA or ROCm: nothing done with it can touch a GPU (what a forkserver
    may import before it forks: runtime/forkserver_ready.py)."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and torch.version.cuda is None and getattr(torch.version, "hip", None) is None
