"""The kill-and-resume harness of the reliability tests and `studies/2026-11-22-fault-injection/fault_injection.py` (test machinery,
not part of the installed library): run `coreward train` in a process of its own (one process: forked from the
preloaded forkserver; torchrun and accelerate launches: new processes), kill it at a named point
(`COREWARD_FAULT_AT`, see `coreward.runtime.faults`) or after a random delay, resume it, and record what
each resume picked up."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from coreward.experiments.jobs import free_port  # noqa: F401 (the tests import it from here)
from coreward.grpo.checkpoints import checkpoint_step
from coreward.runtime.faults import FAULT_ENV, FAULT_RANK_ENV, MAIN_PROCESS_PHASES, PHASES, parse_faults  # noqa: F401


# --------------------------------------------------------------------------- a kill-and-resume harness
# Used by tests/grpo/test_trainer_faults.py and studies/2026-11-22-fault-injection/fault_injection.py: run `coreward train` in a process of its own,
# kill it (at a named point, or after a random delay), resume it, and record what each resume picked up.


@dataclass
class Attempt:
    """One launch of `coreward train`: how it was told to die, and what happened."""

    kill: str  # "PHASE:STEP", "timed:SECONDS", or "" (run to the end)
    resumed_from: str | None  # the checkpoint the run said it continued from (None: from the beginning)
    expected_from: str | None  # the newest complete checkpoint on disk before the launch
    returncode: int
    seconds: float
    incomplete: list[str] = field(default_factory=list)  # checkpoint directories without the marker, after it
    last_logged_step: int = 0  # the last step in metrics.jsonl when it ended
    checkpoint_after: int = 0  # the newest complete checkpoint's step when it ended (0: none)
    log: str = field(repr=False, default="")

    @property
    def killed(self) -> bool:
        """Died of SIGKILL: the process itself, or (torchrun) one of its workers, which torchrun reports."""
        return self.returncode == -signal.SIGKILL or (self.returncode != 0 and "Signal 9 (SIGKILL)" in self.log)


def train_command(config: str | Path, run_dir: Path, overrides: list[str], max_steps: int, resume: bool,
                  nproc: int = 1, accelerate_config: str | Path | None = None) -> list[str]:
    """`coreward train` as a subprocess command; with `nproc` > 1, under torchrun on a free local port; with
    `accelerate_config`, under `accelerate launch` with that config (its process count) on a free port."""
    launcher = [sys.executable, "-m"]
    if accelerate_config is not None:
        launcher += ["accelerate.commands.launch", "--config_file", str(accelerate_config), "--main_process_port",
                     str(free_port()), "-m"]
    elif nproc > 1:
        launcher += ["torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", str(free_port()), "-m"]
    command = [*launcher, "coreward.cli", "train", "--config", str(config), "--output-dir", str(run_dir),
               "--max-steps", str(max_steps)]
    for item in overrides:
        command += ["--set", item]
    return command + (["--resume"] if resume else [])


def launch(command: list[str], run_dir: Path, kill: str = "", timeout_s: float = 600,
           fault_rank: int | None = None, fresh: bool = False) -> Attempt:
    """Run `command`; `kill` is "PHASE:STEP" (COREWARD_FAULT_AT, on every process or on `fault_rank` only),
    "timed:SECONDS" (SIGKILL that long after the run's first new complete checkpoint appears), or "" (no kill).
    `fresh`: a torchrun or accelerate launch in new interpreters, as a user's shell starts it (else `_start`)."""
    from coreward.grpo.checkpoints import COMPLETE_MARKER, last_complete_checkpoint

    before = last_complete_checkpoint(run_dir) if run_dir.exists() else None
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop(FAULT_ENV, None)
    env.pop(FAULT_RANK_ENV, None)
    if kill and not kill.startswith("timed:"):
        env[FAULT_ENV] = kill
        if fault_rank is not None:
            env[FAULT_RANK_ENV] = str(fault_rank)
    start = time.perf_counter()
    with tempfile.NamedTemporaryFile("w+") as log:  # a file, not a pipe: a full pipe would stall the run
        # from the repository root: configs name files relative to it (zero3_cpu.yaml its DeepSpeed json)
        process = _start(command, log, env, Path(__file__).resolve().parents[2], fresh)
        try:
            if kill.startswith("timed:"):
                _kill_after_progress(process, run_dir, before, float(kill.split(":", 1)[1]), timeout_s)
            returncode = process.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - start)))
        finally:
            if process.poll() is None:  # timed out, or the caller was interrupted
                _kill_group(process)
                process.wait()
        log.seek(0)
        text = log.read()
    from coreward.runtime.metrics import read_metrics

    resumed = re.search(r"--resume: continuing from (\S+)", text)
    incomplete = sorted(p.name for p in run_dir.glob("checkpoint-*") if not (p / COMPLETE_MARKER).exists())
    logged = [row.get("step", 0) for row in read_metrics(run_dir / "metrics.jsonl")]
    after = last_complete_checkpoint(run_dir) if run_dir.exists() else None
    return Attempt(kill, resumed.group(1) if resumed else None, str(before) if before else None, returncode,
                   time.perf_counter() - start, incomplete, max(logged, default=0),
                   checkpoint_step(after) if after else 0, text)


def _start(command: list[str], log, env: dict[str, str], cwd: Path, fresh: bool = False):
    """`command` writing to `log`, forked from the forkserver that preloaded the training stack (as `coreward demo`
    and `coreward map` start their runs, experiments/jobs.py): a one-process `python -m coreward.cli train` as
    `coreward_in` forks it, a torchrun or accelerate launch as tests/helpers/warm_launch.py does (torchrun's own
    launcher, its workers forked). A forked run is a process of its own, in a session of its own, with exactly `env`:
    it dies of SIGKILL as a new one does, without the ~5 s of imports each process would pay again. Any other
    command, or any launch with `fresh` (or COREWARD_TEST_FRESH_LAUNCH set), is a new process."""
    from coreward.experiments.jobs import _train_arguments, fork
    from tests.helpers import warm_launch

    arguments = _train_arguments(command)
    if warm_launch.launcher_of(command) is not None and not (fresh or warm_launch.fresh_by_default()):
        return warm_launch.start(command, log.name, log.name, env, cwd)
    if arguments is None:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, text=True, cwd=cwd)
    from tests.helpers.runs import _forked_command

    return fork(_forked_command, (arguments, log.name, log.name, env, str(cwd)))  # both streams in `log`


def _kill_after_progress(process, run_dir: Path, before: Path | None, delay_s: float,
                         timeout_s: float) -> None:
    from coreward.grpo.checkpoints import last_complete_checkpoint

    deadline = time.monotonic() + timeout_s
    while process.poll() is None and time.monotonic() < deadline:
        newest = last_complete_checkpoint(run_dir) if run_dir.exists() else None
        if newest is not None and newest != before:
            break
        time.sleep(0.02)
    time.sleep(delay_s)
    if process.poll() is None:
        _kill_group(process)


def _kill_group(process) -> None:
    """SIGKILL the launch and every process it started, as when the machine dies. torchrun starts its
    workers in sessions of their own, so killing its process group would leave them running: the tree is
    collected first (psutil), then all of it is killed."""
    import psutil

    try:
        root = psutil.Process(process.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for member in tree:
        try:
            member.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree[1:], timeout=30)  # a worker may hold files open; the next launch waits for none


def check_checkpoint(path: Path) -> int:
    """Load everything a resume loads from a checkpoint (weights, optimizer, scheduler, RNG, trainer state,
    reward-source files); returns its global step. Raises when anything is missing or unreadable."""
    import json

    import torch
    from safetensors.torch import load_file

    from coreward.grpo.checkpoints import COMPLETE_MARKER
    from coreward.grpo.trainer import TRAINER_STATE

    path = Path(path)
    if not (path / COMPLETE_MARKER).is_file():
        raise AssertionError(f"{path} has no completeness marker")
    weights = load_file(path / "model.safetensors")
    if not all(torch.isfinite(t).all() for t in weights.values()):
        raise AssertionError(f"{path}: non-finite weights")
    # the optimizer: optimizer.pt (plain), optimizer.bin (FSDP), or DeepSpeed's global_stepN/ shards
    engine_files = [path / "optimizer.pt", path / "optimizer.bin", *sorted(path.glob("global_step*/*optim_states.pt"))]
    optimizer = [file for file in engine_files if file.is_file()]
    if not optimizer:
        raise AssertionError(f"{path}: no optimizer state")
    for file in optimizer:
        torch.load(file, weights_only=False)  # DeepSpeed's shards pickle their own classes
    torch.load(path / "scheduler.pt", weights_only=True)
    # one RNG file per process (rng_state.pth alone, rng_state_R.pth with several), and one state file of ours each
    rng_files = sorted(path.glob("rng_state*.pth"))
    ours = sorted(path.glob(TRAINER_STATE.format(rank="*")))
    if not rng_files or len(ours) != len(rng_files):
        raise AssertionError(f"{path}: {len(rng_files)} RNG state files and {len(ours)} coreward state files")
    for file in [*rng_files, *ours]:
        torch.load(file, weights_only=False)  # numpy state, lists: our own files, not weights-only pickles
    state = json.loads((path / "trainer_state.json").read_text())
    if state["global_step"] != checkpoint_step(path):
        raise AssertionError(f"{path}: trainer_state.json says step {state['global_step']}")
    for file in (path / "reward_sources").rglob("*"):
        if file.suffix == ".json":
            json.loads(file.read_text())
        elif file.suffix == ".safetensors":
            load_file(file)
        elif file.suffix == ".pt":
            torch.load(file, weights_only=False)
    return state["global_step"]


def kill_and_resume(config: str | Path, run_dir: Path, overrides: list[str], max_steps: int, kills: list[str],
                    rng: random.Random, timed_window_s: float = 0.4, timeout_s: float = 600, nproc: int = 1,
                    fault_rank: int | None = None, accelerate_config: str | Path | None = None) -> list[Attempt]:
    """Run to `max_steps` through one killed launch per entry of `kills`, then one launch to the end.

    Each entry is a phase (see `PHASES`) or "timed". A phase kill is placed two steps past the newest complete
    checkpoint (the launch resumes, completes one new checkpoint, and dies at that phase of the next step), so
    every launch makes progress; a timed kill lands a random 0 to `timed_window_s` seconds after the launch's
    first new checkpoint. With `nproc` > 1 each launch is torchrun's, and a phase kill hits `fault_rank` only
    (every process when None). Kills that no longer fit before `max_steps` are not made (the caller sees fewer
    attempts). Before each launch the checkpoint it must resume from is loaded and checked.
    """
    from coreward.grpo.checkpoints import last_complete_checkpoint

    attempts = []
    for kill in [*kills, ""]:
        newest = last_complete_checkpoint(run_dir) if run_dir.exists() else None
        if newest is not None:
            check_checkpoint(newest)
        done = checkpoint_step(newest) if newest is not None else 0
        if kill == "timed":
            kill = f"timed:{rng.uniform(0.0, timed_window_s):.3f}"
        elif kill:
            if done + 2 > max_steps:
                continue
            kill = f"{kill}:{done + 2}"
        elif attempts and done == max_steps and attempts[-1].returncode == 0:
            break  # a timed kill that came too late: the run already finished
        command = train_command(config, run_dir, overrides, max_steps, resume=run_dir.exists(), nproc=nproc,
                                accelerate_config=accelerate_config)
        rank = 0 if fault_rank is not None and kill.split(":")[0] in MAIN_PROCESS_PHASES else fault_rank
        attempts.append(launch(command, run_dir, kill, timeout_s, rank))
    return attempts
