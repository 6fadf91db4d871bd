"""`coreward train` on a tiny policy, as a subprocess or in the test's own process: the command and the small
settings the tests share."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
RULE_CONFIG = REPO / "configs" / "demo" / "rule.yaml"


def coreward(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`coreward ARGS` in a process of its own, here, in this environment (`coreward_in`): for tests of what a process
    does (its exit status, its streams)."""
    return coreward_in(Path.cwd(), *args, env=dict(os.environ), timeout=timeout)


def coreward_in(cwd: Path, *args: str, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    """`coreward ARGS` as a process of its own in `cwd` with exactly `env`, its two streams apart, as a user's shell runs
    it, forked from the forkserver that preloaded the training stack (as `coreward demo` and `coreward map` start their
    runs): the process a new one would be (its directory, environment, exit status, session, one torch thread) without
    its ~5 s of imports. Settings a library reads when it is imported (HF_ENDPOINT, HF_HUB_OFFLINE) are the server's
    there: a test that changes one starts a new interpreter instead."""
    from coreward.experiments.jobs import fork

    arguments = [str(a) for a in args]
    return run_captured([sys.executable, "-m", "coreward.cli", *arguments],
                        lambda out, err: fork(_forked_command, (arguments, out, err, env, str(cwd))), timeout)


def run_captured(command: list[str], start, timeout: float) -> subprocess.CompletedProcess:
    """What `subprocess.run(command, capture_output=True, text=True)` returns, for a process `start(out, err)` starts
    (forked, its two streams written into those files: a pipe it inherited would tie it to this process). At the
    timeout the process and everything it started are killed."""
    from tests.helpers.kill_resume import _kill_group

    with tempfile.TemporaryDirectory() as streams:  # not in the command's directory: the tests read what it leaves
        out, err = Path(streams) / "stdout", Path(streams) / "stderr"
        process = start(str(out), str(err))
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise
        return subprocess.CompletedProcess(command, process.returncode, out.read_text(), err.read_text())


def enter_as_new_process(out: str, err: str, env: dict[str, str], cwd: str) -> None:
    """In a forked child: what a new process started there would have: its directory, exactly `env`, a session of its
    own, its streams in `out` and `err` (one file when they are the same)."""
    from coreward.experiments.jobs import _enter_forked

    os.chdir(cwd)
    os.environ.clear()
    _enter_forked(out, env, error_log=err)


def _forked_command(arguments: list[str], out: str, err: str, env: dict[str, str], cwd: str) -> None:
    """In the forked child: a new process's surroundings (`enter_as_new_process`), then the `coreward` command line
    (`coreward.cli.main`, which exits with the command's status)."""
    enter_as_new_process(out, err, env, cwd)
    sys.argv = ["coreward", *arguments]
    from coreward.cli import main

    main()


def coreward_here(*args: str) -> subprocess.CompletedProcess:
    """`coreward ARGS` in this process, with the exit status and output `coreward.cli.main` gives (a CorewardError:
    "error: ..." on stderr, exit 2). A new Python process spends about 7 s importing torch, transformers and TRL
    before its first step; the tests of what a run does to its directory need no new process."""
    from typer.testing import CliRunner

    from coreward.cli import app
    from coreward.runtime.errors import CorewardError

    result = CliRunner().invoke(app, [str(a) for a in args])
    stdout, stderr, code = result.stdout, result.stderr, result.exit_code
    if isinstance(result.exception, CorewardError):
        stderr, code = stderr + f"error: {result.exception}\n", 2
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["coreward", *args], code, stdout, stderr)


def tiny_train_args(policy: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "train", "--config", str(RULE_CONFIG), "--output-dir", str(run_dir),
        "--set", f"model.name_or_path={policy}",
        "--set", "grpo.per_device_train_batch_size=16",
        "--set", "grpo.max_completion_length=12",
        "--set", "grpo.save_steps=1",
        "--set", "data.eval_every=0",
        *extra,
    ]
