"""torchrun and `accelerate launch` for the tests, without paying the training stack's imports in every process.

A 2-process launch as a user types it (`python -m torch.distributed.run ...`) starts three new interpreters: the
launcher (~1.5 CPU-s of imports) and two workers (~5.5 CPU-s each: torch, transformers, TRL, peft), about 12 CPU-s
before the first step; the suite makes dozens of such launches. Here the launcher is forked from the forkserver that
preloaded the training stack (tests/helpers/runs.py, experiments/jobs.py), and it is the same launcher: torchrun's
own `torch.distributed.run.main` (or accelerate's launch command, which calls it), the same argument parsing, elastic
agent, rendezvous, environment, failure handling and exit status. One thing differs, through torchrun's own option for
it: the workers are started as its function entrypoints are (`--start-method fork`), so each is a fork of the
launcher with the imports done, running the same `python -u -m MODULE ARGS` / `python -u SCRIPT ARGS` it would have
exec'd. These details of that path are made to behave as an exec'd worker does (tests/test_warm_launch.py checks
them, and the same checks on a fresh launch):

* a worker that ends with `os._exit(0)` (coreward.runtime.distributed.exit_now, how `coreward train` ends a
  distributed run) puts no return value on the agent's queue, and the agent would wait for it for ever: an exit
  status of 0 counts as the return value here;
* the worker's streams are unbuffered (`python -u`), its signal handlers are an interpreter's defaults, not the
  launcher's (the agent turns SIGTERM into an exception in itself), and it gets no signal when the launcher dies
  (torch.multiprocessing's fork asks for SIGINT then).

What a fork cannot show -- the launcher's own process structure (workers in sessions of their own, what killing only
the launcher does), and an interpreter importing the package from scratch -- is left to the tests that launch
`torchrun` as a new process (`fresh=True` in tests/helpers/kill_resume.py, tests/grpo/test_preemption.py's signalled
launch, tests/grpo/test_multinode.py's launches through configs/slurm/launch_node.sh, tests/test_gpu_check.py)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.runs import enter_as_new_process, run_captured


LAUNCHERS = {"torch.distributed.run", "accelerate.commands.launch"}
# set (to anything but "" or "0") to launch every torchrun and accelerate launch of the tests in new interpreters, as
# a user's shell does: a test that fails only one way points at this file
FRESH_ENV = "COREWARD_TEST_FRESH_LAUNCH"


def fresh_by_default() -> bool:
    return os.environ.get(FRESH_ENV, "") not in ("", "0")


def launcher_of(command: list[str]) -> str | None:
    """"torch.distributed.run" or "accelerate.commands.launch" for `python -m LAUNCHER ...` with this interpreter."""
    if len(command) > 2 and command[0] == sys.executable and command[1] == "-m" and command[2] in LAUNCHERS:
        return command[2]
    return None


def start(command: list[str], out: str, err: str, env: dict[str, str], cwd: str | Path):
    """`command` (a `python -m torch.distributed.run|accelerate.commands.launch ...` line) forked from the preloaded
    forkserver, in `cwd` with exactly `env`, its streams in `out` and `err` (one file when the same): a process behind
    subprocess.Popen's interface (poll, wait, send_signal, pid, returncode)."""
    from coreward.experiments.jobs import fork

    if launcher_of(command) is None:
        raise ValueError(f"not a torchrun or accelerate launch: {command[:3]}")
    return fork(_launch, (command[2], [str(a) for a in command[3:]], out, err, env, str(cwd)))


def run(command: list[str], env: dict[str, str], cwd: str | Path | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    """`subprocess.run(command, capture_output=True, text=True)` for a launch, through `start` (a new process when
    COREWARD_TEST_FRESH_LAUNCH is set)."""
    if fresh_by_default():
        return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return run_captured(command, lambda out, err: start(command, out, err, env, cwd or Path.cwd()), timeout)


def _launch(launcher: str, arguments: list[str], out: str, err: str, env: dict[str, str], cwd: str) -> None:
    """In the forked launcher: a new process's directory, environment, session and streams, then torchrun's main (or
    accelerate's launch, which calls torchrun's `run`) with its workers forked."""
    enter_as_new_process(out, err, env, cwd)
    # what a new interpreter reads from its environment: PYTHONPATH ahead of the rest of sys.path
    sys.path[:0] = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    _workers_forked()
    if launcher == "torch.distributed.run":
        from torch.distributed.run import main

        sys.argv = ["torchrun", *arguments]
        main()
    else:
        from accelerate.commands.launch import main

        sys.argv = ["accelerate-launch", *arguments]
        main()


def _workers_forked() -> None:
    """torchrun's configuration as it parses it, with the worker command `python -u [-m] TARGET ARGS` replaced by
    `_worker` running the same in a fork of this process, and an exit status of 0 counted as a returned worker."""
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext

    parse = torchrun.config_from_args

    def config_from_args(args):
        config, command, command_args = parse(args)
        if isinstance(command, str) and command == sys.executable and command_args[:1] == ["-u"]:
            config.start_method = "fork"
            return config, _worker, command_args[1:]
        return config, command, command_args

    torchrun.config_from_args = config_from_args

    is_done = MultiprocessContext._is_done

    def exited_zero_is_done(self) -> bool:
        for rank, process in enumerate(self._pc.processes if self._pc else []):
            if process.exitcode == 0 and rank not in self._return_values:
                self._return_values[rank] = None  # ended by os._exit(0): nothing was put on its queue
        return is_done(self)

    MultiprocessContext._is_done = exited_zero_is_done


def _worker(*command_args: str) -> None:
    """A worker: what `python -u [-m] TARGET ARGS` runs, in this (forked) process."""
    import runpy
    import warnings

    # runpy's warning that MODULE was imported before it ran as __main__: here it was, by the forkserver's preload
    warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning)
    # torch.multiprocessing asks for SIGINT when the launcher dies; an exec'd worker gets none (a kill of the whole
    # tree, the tests' "machine dies", must not hand a worker a Ctrl-C to act on first)
    from torch.multiprocessing import _prctl_pr_set_pdeathsig

    _prctl_pr_set_pdeathsig(0)
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for descriptor, name in ((1, "stdout"), (2, "stderr")):  # python -u: no buffer between a print and the file
        setattr(sys, name, io.TextIOWrapper(io.FileIO(descriptor, "w", closefd=False), write_through=True))
    if command_args[0] == "-m":
        module, rest = command_args[1], list(command_args[2:])
        sys.argv = [module, *rest]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, rest = command_args[0], list(command_args[1:])
        sys.argv = [script, *rest]
        sys.path.insert(0, str(Path(script).resolve().parent))
        runpy.run_path(script, run_name="__main__")
