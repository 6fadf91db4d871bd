"""Independent `coreward train` runs side by side: a pool of subprocesses, each with one torch thread, with a
progress line. `coreward map` runs its cells with it, `coreward demo --jobs N` its methods and seeds.

A run is a subprocess writing its own run directory and log; nothing is shared between runs but the cores. On a
2-core machine one thread a run is the fastest setting (benchmarks/grpo_step_time.py): OpenMP threads of several
runs spinning on the same cores cost more than they give.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Job:
    label: str  # how progress lines name it
    command: list[str]
    run_dir: Path
    log: Path  # the run's stdout and stderr
    steps: int  # its last step, for the progress line
    status: str = "waiting"  # waiting | running | done | failed | stopped
    returncode: int | None = None
    seconds: float | None = None
    extra: dict = field(default_factory=dict)  # the caller's own bookkeeping


def default_jobs() -> int:
    """Half the usable cores: each run has one torch thread, plus verifier worker processes and data loading."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train_command(config: Path, run_dir: Path, overrides: Sequence[str], *options: str) -> list[str]:
    """`coreward train --config CONFIG --output-dir RUN_DIR [OPTIONS]` with each override a `--set`, as a job's command
    (this Python, so a virtual environment's coreward)."""
    return [sys.executable, "-m", "coreward.cli", "train", "--config", str(config), "--output-dir", str(run_dir),
            *options, *(a for item in overrides for a in ("--set", item))]


def last_step(run_dir: Path) -> int:
    """The newest step in a run's metrics.jsonl (0 when none yet); reads only the file's tail."""
    path = run_dir / "metrics.jsonl"
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 8192))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def run_jobs(jobs: list[Job], parallel: int, *, prefix: str, noun: str = "runs", say: Callable[[str], None] = print,
             succeeded: Callable[[Job], bool] = lambda job: True,
             on_finish: Callable[[Job], None] | None = None, progress_every: float = 30.0) -> None:
    """Run every job whose status is "waiting", `parallel` at a time, printing a progress line (`prefix: 2/8
    <noun> done; running: ...`) on every change
    and every `progress_every` seconds. A job is done when it exits 0 and `succeeded(job)`; `on_finish` is
    called with each done job once the free slots are refilled (so it overlaps the runs still going). Ctrl-C
    (or SIGTERM) stops the running jobs cleanly (`coreward train` checkpoints on SIGTERM) and raises."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    running: dict[int, tuple[Job, subprocess.Popen, object, float]] = {}
    start, last_line = time.monotonic(), 0.0

    def line() -> str:
        done = sum(j.status == "done" for j in jobs)
        failed = sum(j.status == "failed" for j in jobs)
        now = ", ".join(f"{j.label} step {last_step(j.run_dir)}/{j.steps}" for j, *_ in running.values())
        return (f"{prefix}: {done}/{len(jobs)} {noun} done" + (f", {failed} failed" if failed else "")
                + (f"; running: {now}" if now else "") + f"; {duration(time.monotonic() - start)} elapsed")

    def launch() -> None:
        waiting = [j for j in jobs if j.status == "waiting"]
        while waiting and len(running) < parallel:
            job = waiting.pop(0)
            job.log.parent.mkdir(parents=True, exist_ok=True)
            log = open(job.log, "a")
            # a port of its own for torch.distributed's rendezvous (a vLLM engine's, in a one-process run): TRL picks
            # 29500 when it looks free, and two runs started at once would both see it free
            process = subprocess.Popen(job.command, stdout=log, stderr=subprocess.STDOUT,
                                       env={**env, "MASTER_PORT": str(free_port())},
                                       start_new_session=True)  # Ctrl-C reaches the pool, which stops each run
            job.status = "running"
            running[process.pid] = (job, process, log, time.monotonic())
            say(f"{prefix}: started {job.label} -> {job.run_dir}")

    try:
        while True:
            launch()
            if not running:
                if not last_line:  # nothing ran: every job was finished already
                    say(line())
                break
            finished = []
            for pid, (job, process, log, began) in list(running.items()):
                if process.poll() is None:
                    continue
                log.close()
                del running[pid]
                job.returncode, job.seconds = process.returncode, time.monotonic() - began
                job.status = "done" if process.returncode == 0 and succeeded(job) else "failed"
                if job.status == "failed":
                    say(f"{prefix}: {job.label} failed (exit {process.returncode}); see {job.log}")
                finished.append(job)
            if finished or time.monotonic() - last_line >= progress_every:
                say(line())
                last_line = time.monotonic()
            if finished and on_finish:
                launch()  # the free slots first: the caller's work overlaps the runs still going
                for job in finished:
                    if job.status == "done":
                        on_finish(job)
            time.sleep(0.5)
    except KeyboardInterrupt:
        for _job, process, _log, _ in running.values():  # coreward train checkpoints on SIGTERM and exits 75
            process.send_signal(signal.SIGTERM)
        for job, process, log, _ in running.values():
            process.wait()
            log.close()
            job.status = "stopped"
        raise
