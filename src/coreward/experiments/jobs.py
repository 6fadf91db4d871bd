"""Independent `coreward train` runs side by side: a pool of child processes, each with one torch thread, with a
progress line. `coreward map` runs its cells with it, `coreward demo` its methods and seeds.

A run is a process of its own writing its own run directory and log; nothing is shared between runs but the cores.
Three things make N runs on N cores take about 1/N of the time (benchmarks/speed/demo_jobs_speedup.py; docs/figures.md):

* one torch thread a run (OpenMP threads of several runs spinning on the same cores cost more than they give),
  and one verifier worker a run where runs share the cores (`verifier_workers`: the reward is a small part of a
  demo step, and every worker is one more process at start-up);
* each run forked from a forkserver that has already imported torch, transformers and TRL (`PRELOAD`), instead
  of a fresh `python -m coreward.cli train` paying those imports again;
* the longest runs first (`Job.cost`), so that the last minutes are not one long run alone on one core.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coreward.runtime.devices import usable_cores
from coreward.runtime.host_memory import available_memory
from coreward.runtime.progress import duration


@dataclass
class Job:
    label: str  # how progress lines name it
    command: list[str]
    run_dir: Path
    log: Path  # the run's stdout and stderr
    steps: int  # its last step, for the progress line
    status: str = "waiting"  # waiting | running | done | failed | stopped
    cost: float | None = None  # its expected length (any unit: steps by default); the longest start first
    returncode: int | None = None
    seconds: float | None = None
    extra: dict = field(default_factory=dict)  # the caller's own bookkeeping
    # a function of coreward's to run in the forked process instead of `command` (`command` is then only its name);
    # it succeeds by returning, fails by raising (exit 1, its traceback in `log`)
    target: Callable[..., None] | None = None
    args: tuple = ()
    # how far a function job is, for the progress line (e.g. "48/112 problems"): read by the parent from what the job
    # leaves on disk, every `progress_every` seconds
    progress: Callable[[], str] | None = None


def step_cost(rewards: Sequence[str]) -> float:
    """A run's step time relative to the rule reward's, for the order of side-by-side runs (longest first): that of
    its costliest reward source (`RewardSource.step_cost`); 1 for a reward that cannot be loaded here."""
    from coreward.rewards import source_class
    from coreward.runtime.errors import CorewardError

    costs = []
    for name in rewards:
        try:
            costs.append(source_class(name).step_cost)
        except CorewardError:
            costs.append(1.0)
    return max(costs, default=1.0)


# What one side-by-side run of the demo or the map holds at its peak, with room to spare over the largest demo run's
# peak RSS (docs/figures.md), so that the default never asks for more runs than the memory holds.
RUN_MEMORY_BYTES = 1.5 * 2**30


def default_jobs() -> int:
    """One run per usable core, as many as the memory holds: each run is one torch thread (plus one verifier
    worker), so N runs on N cores is the fastest setting (benchmarks/speed/demo_jobs_speedup.py, docs/figures.md)."""
    memory = available_memory()
    fits = max(1, int(memory // RUN_MEMORY_BYTES)) if memory else usable_cores()
    return max(1, min(usable_cores(), fits))


def verifier_workers(parallel: int) -> int:
    """Verifier worker processes per run when `parallel` runs share the machine: the cores each run has."""
    return max(1, usable_cores() // max(1, parallel))


def side_by_side_settings(parallel: int) -> list[str]:
    """The `--set` items of a `coreward train` run when `parallel` runs share the machine (the demo's runs, the map's
    cells): one torch thread, as the pool starts it (a config's own torch_threads, configs/smol's 2, would put
    2 x parallel threads on the cores), and one verifier worker per core the run has."""
    return ["torch_threads=1", f"verifier.num_workers={verifier_workers(parallel)}"]


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


# imported once in the forkserver every run is forked from: `coreward train` and its training stack (torch,
# transformers, TRL, accelerate, datasets) and the verifier
PRELOAD = ("coreward.grpo.cli", "coreward.grpo.train", "coreward.grpo.trainer", "coreward.verify.pool", "math_verify")


def warm_forkserver() -> None:
    """Start the forkserver the runs are forked from now, without waiting for it: it imports `PRELOAD` (seconds of
    imports) on another core while the caller does its own preparation, instead of after it, when the first
    run starts."""
    from multiprocessing import forkserver as server

    from coreward.runtime import forkserver

    if forkserver.context(*PRELOAD).get_start_method() != "forkserver":
        return
    with forkserver.main_module_hidden():  # the server would import the caller's __main__ too (see start)
        server.ensure_running()


def _train_arguments(command: list[str]) -> list[str] | None:
    """The arguments of a `python -m coreward.cli train ...` command (`train_command`), "train" first; None for
    any other command."""
    if command[:4] == [sys.executable, "-m", "coreward.cli", "train"]:
        return command[3:]
    return None


def _enter_forked(log: str, env: dict[str, str], error_log: str | None = None) -> None:
    """What a forked job does first: a session of its own (Ctrl-C reaches the pool, which stops each run with SIGTERM,
    and `coreward train` checkpoints on it), the pool's environment, its output in `log` (its standard error too, or
    in `error_log`), its torch threads."""
    os.setsid()
    os.environ.update(env)
    for stream, path in ((1, log), (2, error_log or log)):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(descriptor, stream)
        os.close(descriptor)
    import torch

    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))


def _run_train(arguments: list[str], log: str, env: dict[str, str]) -> None:
    """A forked run: `coreward train ...` in this process."""
    _enter_forked(log, env)
    sys.argv = ["coreward", *arguments]
    # the names the command line registers before `coreward train` reads a config: the demo's models (`demo:1` ...
    # in an ensemble's `path`). Without them a forked run refused a config the same command accepts. By name: the
    # demo sits above this layer, and a forked run is the command line's `train`.
    importlib.import_module("coreward.demo")
    from coreward.grpo.cli import run_train

    run_train(arguments)  # exits through SystemExit: its code is the process's exit code, as `coreward train`'s


def _run_target(target: Callable[..., None], args: tuple, log: str, env: dict[str, str]) -> None:
    """A forked job that is a function (`Job.target`), e.g. the demo's evaluation of a finished run."""
    _enter_forked(log, env)
    target(*args)


class _Forked:
    """A forked run behind subprocess.Popen's interface (poll, send_signal, wait, returncode)."""

    def __init__(self, process):
        self.process, self.pid = process, process.pid

    def poll(self) -> int | None:
        return self.process.exitcode

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def send_signal(self, number: int) -> None:
        if self.process.exitcode is None:
            os.kill(self.pid, number)

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(f"forked run {self.pid}", timeout)
        return self.process.exitcode


def start(job: Job, env: dict[str, str]) -> subprocess.Popen | _Forked:
    """Start `job`: forked from the preloaded forkserver when it is a `coreward train` command or a function
    (`Job.target`), else as a subprocess. Either way in a new session (Ctrl-C reaches the pool, which stops each run),
    its output appended to `job.log`. The first job asks the forkserver for its preload before starting it, so a server
    started by it has the training stack imported."""
    job.log.parent.mkdir(parents=True, exist_ok=True)
    arguments = _train_arguments(job.command)
    if job.target is not None:
        target, args = _run_target, (job.target, job.args, str(job.log), env)
    elif arguments is not None:
        target, args = _run_train, (arguments, str(job.log), env)
    else:
        with open(job.log, "a") as log:  # the child holds its own copy of the descriptor
            return subprocess.Popen(job.command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                    start_new_session=True)
    return fork(target, args)


def fork(target: Callable[..., None], args: tuple) -> _Forked:
    """`target(*args)` in a process forked from the forkserver that preloaded the training stack (`PRELOAD`)."""
    from coreward.runtime import forkserver

    process = forkserver.context(*PRELOAD).Process(target=target, args=args)
    with forkserver.main_module_hidden():
        process.start()
    return _Forked(process)


def run_jobs(jobs: list[Job], parallel: int, *, prefix: str, noun: str = "runs", say: Callable[[str], None] = print,
             succeeded: Callable[[Job], bool] = lambda job: True,
             on_finish: Callable[[Job], Sequence[Job] | None] | None = None, progress_every: float = 30.0) -> None:
    """Run every job whose status is "waiting", `parallel` at a time, longest first (`Job.cost`, else its steps),
    printing a progress line (`prefix: 2/8 <noun> done; running: ...`) on every change and every `progress_every`
    seconds. A job is done when it exits 0 and `succeeded(job)`; `on_finish` is called with each done job once the
    free slots are refilled, and the jobs it returns join the queue in their place by cost (the demo's evaluation of
    a finished run: a short job, so it waits for the training runs and fills the cores the last of them leave idle).
    The progress line counts the command jobs (the runs), not the function jobs (`Job.target`). Ctrl-C (or SIGTERM)
    stops the running jobs cleanly (`coreward train` checkpoints on SIGTERM) and raises."""
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    running: dict[int, tuple[Job, subprocess.Popen | _Forked, float]] = {}
    start_time, last_line = time.monotonic(), 0.0

    def size(job: Job) -> float:
        return job.cost if job.cost is not None else job.steps

    order = sorted((j for j in jobs if j.status == "waiting"), key=lambda j: -size(j))

    counted = [j for j in jobs if j.target is None]  # the runs: a function job is the caller's own work

    def shown(job: Job) -> str:  # a run by its step; a function job by its own progress, where it has one
        if job.target is None:
            return f"{job.label} step {last_step(job.run_dir)}/{job.steps}"
        return f"{job.label} {job.progress()}" if job.progress else job.label

    def line() -> str:
        done = sum(j.status == "done" for j in counted)
        failed = sum(j.status == "failed" for j in counted)
        now = ", ".join(shown(j) for j, *_ in running.values())
        return (f"{prefix}: {done}/{len(counted)} {noun} done" + (f", {failed} failed" if failed else "")
                + (f"; running: {now}" if now else "") + f"; {duration(time.monotonic() - start_time)} elapsed")

    def launch() -> None:
        while order and len(running) < parallel:
            job = order.pop(0)
            # a port of its own for torch.distributed's rendezvous (a vLLM engine's, in a one-process run): TRL picks
            # 29500 when it looks free, and two runs started at once would both see it free
            process = start(job, {**env, "MASTER_PORT": str(free_port())})
            job.status = "running"
            running[process.pid] = (job, process, time.monotonic())
            say(f"{prefix}: started {job.label} -> {job.run_dir}")

    # SIGTERM (a scheduler's stop, `kill`) as Ctrl-C: without this the pool died at once and left its runs going,
    # each in a session of its own, with nothing left to stop them or record them
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if on_main_thread else None
    try:
        while True:
            launch()
            if not running:
                if not last_line:  # nothing ran: every job was finished already
                    say(line())
                break
            finished = []
            for pid, (job, process, began) in list(running.items()):
                if process.poll() is None:
                    continue
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
                launch()  # the free slots first: the caller's work overlaps the jobs still going
                for job in finished:
                    if job.status == "done":
                        order.extend(j for j in on_finish(job) or () if j.status == "waiting")
                order.sort(key=lambda j: -size(j))  # stable: equal costs keep their order
            time.sleep(0.5)
    except KeyboardInterrupt:
        for _job, process, _ in running.values():  # coreward train checkpoints on SIGTERM and exits 75
            process.send_signal(signal.SIGTERM)
        for job, process, _ in running.values():
            job.returncode = process.wait()
            job.status = "stopped"
        raise
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(number: int, frame) -> None:
    raise KeyboardInterrupt
