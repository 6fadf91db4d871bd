"""Small helpers for reward sources that run on every process with the same global batch.

A source sees the whole batch on every process. Expensive per-item work (an RM forward pass, teacher
rollouts) is split instead: each process does a contiguous share and the results are gathered back in
order, so every process ends with the same full list. Work that must happen once (calls to a paid
endpoint) runs on the main process and is broadcast.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar


T = TypeVar("T")
R = TypeVar("R")


def _state():
    from accelerate.state import PartialState

    return PartialState()


def world() -> tuple[int, int]:
    """(process index, number of processes); (0, 1) outside a distributed run."""
    try:
        state = _state()
        return state.process_index, state.num_processes
    except Exception:  # no accelerate state initialised: a plain single process
        return 0, 1


def shard_bounds(n: int, rank: int, size: int) -> tuple[int, int]:
    """Contiguous, near-equal share of n items for process `rank` of `size`."""
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def distributed_map(fn: Callable[[Sequence[T]], list[R]], items: Sequence[T]) -> list[R]:
    """Run `fn` on this process's share of `items`; every process gets all results, in order."""
    rank, size = world()
    if size == 1:
        return list(fn(items))
    from accelerate.utils import gather_object

    start, stop = shard_bounds(len(items), rank, size)
    local = list(fn(items[start:stop])) if stop > start else []
    return gather_object(local)


def on_main_then_broadcast(fn: Callable[[], Any]) -> Any:
    """Run `fn` on the main process only and give its (picklable) result to every process."""
    rank, size = world()
    if size == 1:
        return fn()
    from accelerate.utils import broadcast_object_list

    holder = [fn() if rank == 0 else None]
    broadcast_object_list(holder, from_process=0)
    return holder[0]


def print_once(message: str) -> None:
    """Print on the main process only. Read from torchrun's / accelerate's RANK, so it works before any
    process group exists: messages of several processes would interleave on one terminal."""
    import os

    if os.environ.get("RANK", "0") == "0":
        print(message, flush=True)


def load_location(device: Any) -> Any:
    """A `map_location` for torch.load onto `device`. accelerate names the CPU of process R `cpu:R` in a
    multi-process CPU run, and torch.load refuses to restore storage to an indexed CPU: plain "cpu" then."""
    import torch

    device = torch.device(device)
    return "cpu" if device.type == "cpu" else device


def leave_process_group() -> bool:
    """Leave the process group together before the interpreter exits (True when there was one). A process that
    exits while the group's background threads still run can abort at teardown ("terminate called without an
    active exception", exit -6) after its work is done, failing a finished run; seen with ZeRO-3 on gloo."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        return True
    return False


def exit_now(code: int) -> None:
    """End a process of a finished distributed run without the interpreter's teardown, whose destruction of
    the engines' C++ threads still aborted a ZeRO-3 rank now and then (exit -6) after the group was left and
    every file written. The run's files, the verifier's workers and the reward sources are closed before this."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
