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
    it. `coreward train` is forked from the forkserver that preloaded the training stack (as `coreward demo` and `coreward
    map` start their runs): the same process a new one would be (its directory, environment, exit status, session)
    without its ~5 s of imports. Settings read when a library is imported (HF_ENDPOINT, HF_HUB_OFFLINE) are the
    server's there: a test that changes one runs a new interpreter (`fresh=True` of `coreward`)."""
    from coreward.experiments.jobs import _train_arguments, fork

    command = [sys.executable, "-m", "coreward.cli", *args]
    arguments = _train_arguments(command)
    if arguments is None:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    with tempfile.TemporaryDirectory() as streams:  # not in `cwd`: the tests read what a run leaves there
        out, err = Path(streams) / "stdout", Path(streams) / "stderr"
        process = fork(_forked_train, (arguments, str(out), str(err), env, str(cwd)))
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(9)
            raise
        stdout, stderr = out.read_text(), err.read_text()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _forked_train(arguments: list[str], out: str, err: str, env: dict[str, str], cwd: str) -> None:
    from coreward.experiments.jobs import _run_train

    os.chdir(cwd)
    os.environ.clear()
    _run_train(arguments, out, env, error_log=err)


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
