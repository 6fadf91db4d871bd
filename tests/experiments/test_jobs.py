"""The side-by-side runner of `coreward demo` and `coreward map` (experiments/jobs.py): runs forked from the
preloaded forkserver behave as `coreward` commands (their output, their exit status), the longest start first,
the caller's work runs alongside, and the default number of runs fits the cores and the memory."""

from __future__ import annotations

import sys

from coreward.experiments import jobs as jobs_module
from coreward.experiments.jobs import Job, default_jobs, run_jobs, verifier_workers


def cli_job(tmp_path, label: str, *arguments: str, steps: int = 1, cost: float | None = None) -> Job:
    return Job(label, [sys.executable, "-m", "coreward.cli", *arguments], tmp_path / label, tmp_path / f"{label}.log",
               steps, cost=cost)


def test_forked_runs_are_coreward_commands_with_their_output_and_exit_status(tmp_path):
    right = cli_job(tmp_path, "right", "verify", "\\frac{1}{2}", "--gold", "0.5")
    wrong = cli_job(tmp_path, "wrong", "verify", "3", "--gold", "4")
    refused = cli_job(tmp_path, "refused", "verify", "1", "--gold", "1", "--no-such-option")
    lines: list[str] = []
    run_jobs([right, wrong, refused], 2, prefix="t", say=lines.append, progress_every=60)
    assert (right.status, right.returncode) == ("done", 0)
    assert right.log.read_text().strip().endswith("true")
    assert wrong.log.read_text().strip().endswith("false")
    assert (refused.status, refused.returncode) == ("failed", 2)  # click's usage error, as `coreward` exits
    assert "No such option" in refused.log.read_text()
    assert any("refused failed (exit 2)" in line for line in lines)
    assert right.extra == {} and jobs_module._cli_arguments(right.command) == ["verify", "\\frac{1}{2}", "--gold", "0.5"]


def test_a_command_that_is_not_coreward_runs_as_a_subprocess(tmp_path):
    job = Job("echo", [sys.executable, "-c", "import os; print('hello', os.environ['OMP_NUM_THREADS'])"],
              tmp_path / "echo", tmp_path / "echo.log", 1)
    run_jobs([job], 1, prefix="t", say=lambda line: None)
    assert job.status == "done" and job.log.read_text().strip() == "hello 1"


def test_the_longest_runs_start_first_and_the_callers_work_runs_alongside(tmp_path):
    short = cli_job(tmp_path, "short", "verify", "1", "--gold", "1", steps=10)
    long = cli_job(tmp_path, "long", "verify", "1", "--gold", "1", steps=60)
    costly = cli_job(tmp_path, "costly", "verify", "1", "--gold", "1", steps=30, cost=100.0)  # its cost, not steps
    lines: list[str] = []
    calls: list[int] = []
    run_jobs([short, long, costly], 1, prefix="t", say=lines.append,
             alongside=lambda: calls.append(sum(line.startswith("t: started") for line in lines)))
    started = [line.split()[2] for line in lines if line.startswith("t: started")]
    assert started == ["costly", "long", "short"]
    assert calls == [1]  # once, after the first run started


def test_default_jobs_is_one_run_per_core_as_far_as_the_memory_holds(monkeypatch):
    monkeypatch.setattr(jobs_module, "usable_cores", lambda: 8)
    monkeypatch.setattr(jobs_module, "available_memory", lambda: 64 * 2**30)
    assert default_jobs() == 8
    monkeypatch.setattr(jobs_module, "available_memory", lambda: 4 * 2**30)  # 1.5 GiB a run: two fit
    assert default_jobs() == 2
    monkeypatch.setattr(jobs_module, "available_memory", lambda: 2**29)
    assert default_jobs() == 1
    monkeypatch.setattr(jobs_module, "available_memory", lambda: None)  # no /proc/meminfo: the cores decide
    assert default_jobs() == 8
    assert verifier_workers(8) == 1 and verifier_workers(2) == 4 and verifier_workers(1) == 8
