"""What a run's memory plan said beside what the run measured: RUN_DIR/memory.json at the end of `coreward train`
(and when a preemption stops it), and the log line "memory: measured peak X (planned Y, ratio Z)".

Each process writes its own file, so no collective is entered (a preempted or failing rank cannot hang the
others): the main process memory.json, the others memory-rank{R}.json. Measured: on CUDA the process's
`torch.cuda.max_memory_allocated` and `max_memory_reserved` of its device (what PyTorch's allocator handed out and
held; vLLM's reservation and other processes are not in it); on CPU the process's peak resident memory
(`getrusage(RUSAGE_SELF).ru_maxrss`, KiB on Linux), which is what `coreward plan --device cpu` predicts.
The ratio is measured / planned peak."""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path
from typing import Any

from coreward.runtime.files import atomic_write_text
from coreward.runtime.memory import format_bytes


MEMORY_FILE = "memory.json"


def memory_file(run_dir: str | os.PathLike, rank: int) -> Path:
    """This process's record: memory.json for the main process (rank 0), memory-rank{R}.json for the others."""
    return Path(run_dir) / (MEMORY_FILE if rank == 0 else f"memory-rank{rank}.json")


def measured_peak(device: str | None = None) -> dict[str, Any]:
    """This process's peak memory so far: the allocator's peaks on its CUDA device (`device`, "cuda:N"; by default
    the current one, where CUDA is in use), else its peak resident set."""
    import torch

    on_cuda = device.startswith("cuda") if device else torch.cuda.is_available() and torch.cuda.is_initialized()
    if on_cuda:
        index = torch.device(device).index if device else torch.cuda.current_device()
        device = index or 0
        allocated = torch.cuda.max_memory_allocated(device)
        return {"device": f"cuda:{device}", "measure": "max_memory_allocated", "peak_bytes": allocated,
                "max_memory_allocated": allocated, "max_memory_reserved": torch.cuda.max_memory_reserved(device)}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {"device": "cpu", "measure": "peak_rss", "peak_bytes": rss, "peak_rss": rss}


def record_memory(run_dir: str | os.PathLike, plan, step: int, stopped: str = "end") -> str:
    """Write this process's measured peak beside `plan` (grpo/plan/'s Plan of this run; None: it was not planned)
    to its memory file, and return the run log's line."""
    rank = int(os.environ.get("RANK", "0"))
    measured = measured_peak()
    record: dict[str, Any] = {"rank": rank, "step": step, "stopped": stopped, "measured": measured}
    ratio = None
    if plan is not None:
        ratio = measured["peak_bytes"] / plan.peak_bytes if plan.peak_bytes else None
        record["planned"] = {"peak_bytes": plan.peak_bytes, "peak_phase": plan.peak_phase,
                             "device_bytes": plan.device_bytes, "hardware": plan.to_json()["hardware"],
                             "phases": {phase: plan.phase_bytes(phase) for phase in plan.phases}}
    record["ratio"] = ratio
    atomic_write_text(memory_file(run_dir, rank), json.dumps(record, indent=1) + "\n")
    if measured["measure"] == "max_memory_allocated":
        what = f"the most torch allocated at once on {measured['device']} (max_memory_allocated)"
    else:
        what = "the peak resident memory of the process (peak RSS)"
    planned = "not planned" if plan is None else f"planned {format_bytes(plan.peak_bytes)}, ratio {ratio:.2f}"
    return f"memory: measured peak {format_bytes(measured['peak_bytes'])} ({planned}): {what}"
