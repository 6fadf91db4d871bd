"""The side-by-side runner of `coreward demo` and `coreward map` (experiments/jobs.py): runs forked from the
preloaded forkserver behave as `coreward` commands (their output, their exit status), the longest start first,
the caller's follow-up work waits for the runs, and the default number of runs fits the cores and the memory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from coreward.experiments import jobs as jobs_module
from coreward.experiments.jobs import Job, default_jobs, last_step, run_jobs, verifier_workers
from tests.helpers.runs import RULE_CONFIG, tiny_train_args


def train_job(tmp_path, label: str, *arguments: str, steps: int = 1, cost: float | None = None) -> Job:
    return Job(label, [sys.executable, "-m", "coreward.cli", *arguments], tmp_path / label, tmp_path / f"{label}.log",
               steps, cost=cost)


def test_forked_runs_are_coreward_train_with_its_output_and_exit_status(tiny_policy, tmp_path):
    """A `coreward train` job is forked from the preloaded forkserver (not a new interpreter) and behaves as the
    command: its lines in its log, exit 0 and a final model; a bad config's one-line error and exit 2; click's usage
    error and exit 2."""
    trained = train_job(tmp_path, "trained", *tiny_train_args(tiny_policy, tmp_path / "trained", "--max-steps", "1"))
    bad = train_job(tmp_path, "bad", *tiny_train_args(tiny_policy, tmp_path / "bad", "--set", "grpo.no_such_key=1"))
    refused = train_job(tmp_path, "refused", "train", "--no-such-option")
    # a config naming the demo RM's ensemble members: the fork knows the names the command line registers (demo:1 ...;
    # a member no one registered is refused, listing them), as `coreward map` with ensemble_min.yaml needs
    members = tmp_path / "members.yaml"
    members.write_text(f"base: {RULE_CONFIG}\nrewards:\n  - name: model\n    params: {{path: [demo, 'demo:9']}}\n")
    unknown = train_job(tmp_path, "unknown", *tiny_train_args(tiny_policy, tmp_path / "unknown"))
    unknown.command[unknown.command.index(str(RULE_CONFIG))] = str(members)
    lines: list[str] = []
    run_jobs([trained, bad, refused, unknown], 2, prefix="t", say=lines.append, progress_every=60)
    assert (unknown.status, unknown.returncode) == ("failed", 2), unknown.log.read_text()[-3000:]
    assert "'demo:9' is neither a directory nor a known rm name (known: demo, demo:1, demo:2" in unknown.log.read_text()
    assert (trained.status, trained.returncode) == ("done", 0), trained.log.read_text()[-3000:]
    assert "finished at step 1; final model in" in trained.log.read_text() and (tmp_path / "trained" / "final").is_dir()
    assert (bad.status, bad.returncode) == ("failed", 2)
    assert "error: " in bad.log.read_text() and "no_such_key" in bad.log.read_text()
    assert (refused.status, refused.returncode) == ("failed", 2)  # click's usage error, as `coreward` exits
    assert "No such option" in refused.log.read_text()
    assert any("refused failed (exit 2)" in line for line in lines)
    assert jobs_module._train_arguments(refused.command) == ["train", "--no-such-option"]
    assert jobs_module._train_arguments([sys.executable, "-m", "coreward.cli", "verify", "1"]) is None


def test_a_command_that_is_not_coreward_runs_as_a_subprocess(tmp_path):
    job = Job("echo", [sys.executable, "-c", "import os; print('hello', os.environ['OMP_NUM_THREADS'])"],
              tmp_path / "echo", tmp_path / "echo.log", 1)
    run_jobs([job], 1, prefix="t", say=lambda line: None)
    assert job.status == "done" and job.log.read_text().strip() == "hello 1"


def write_note(path: str, text: str) -> None:  # a function job's target (forked: importable by name)
    Path(path).write_text(text)


def fail(message: str) -> None:
    raise RuntimeError(message)


def write_parts(directory: str, parts: int) -> None:  # a function job that leaves its progress on disk, part by part
    import time

    for part in range(parts):
        (Path(directory) / f"part-{part}").write_text("done")
        time.sleep(0.4)


def test_a_function_job_shows_how_far_it_is_on_the_progress_line(tmp_path):
    """The demo's evaluation of a real model takes minutes: its progress (read from what it has written) is on the
    line printed every `progress_every` seconds, beside its name."""
    tmp_path.joinpath("parts").mkdir()
    job = Job("evaluation of x", ["write_parts"], tmp_path / "parts", tmp_path / "parts.log", 0, target=write_parts,
              args=(str(tmp_path / "parts"), 5),
              progress=lambda: f"{len(list((tmp_path / 'parts').glob('part-*')))}/5 parts")
    lines: list[str] = []
    run_jobs([job], 1, prefix="t", say=lines.append, progress_every=0.1)
    assert job.status == "done", job.log.read_text()
    shown = [line.split("running: evaluation of x ")[1].split(";")[0] for line in lines if "running: evaluation of x" in line]
    assert shown and shown[-1] != "0/5 parts" and all(s.endswith("/5 parts") for s in shown), lines


def test_the_longest_runs_start_first_and_the_follow_up_work_waits_for_them(tmp_path):
    """Runs start by cost (else steps); the jobs `on_finish` returns (the demo's evaluations: function jobs, forked)
    join the queue by their cost, so short ones run after the runs; one that raises fails with its traceback in its
    log; the progress line counts the runs only."""
    def quick(label: str, **size) -> Job:  # a command that is not `coreward train`: a subprocess
        return Job(label, [sys.executable, "-c", "pass"], tmp_path / label, tmp_path / f"{label}.log", **size)

    short, long = quick("short", steps=10), quick("long", steps=60)
    costly = quick("costly", steps=30, cost=100.0)  # its cost, not its steps
    follow_ups = {
        "costly": Job("note", ["write_note"], tmp_path / "note", tmp_path / "note.log", 0, cost=1.0,
                      target=write_note, args=(str(tmp_path / "note.txt"), "after costly")),
        "long": Job("broken", ["fail"], tmp_path / "broken", tmp_path / "broken.log", 0, cost=2.0,
                    target=fail, args=("no such model",)),
    }
    lines: list[str] = []
    run_jobs([short, long, costly], 1, prefix="t", say=lines.append,
             on_finish=lambda job: [follow_ups[job.label]] if job.label in follow_ups else None)
    started = [line.split()[2] for line in lines if line.startswith("t: started")]
    assert started == ["costly", "long", "short", "broken", "note"]
    assert (tmp_path / "note.txt").read_text() == "after costly" and follow_ups["costly"].status == "done"
    assert (follow_ups["long"].status, follow_ups["long"].returncode) == ("failed", 1)
    assert "RuntimeError: no such model" in (tmp_path / "broken.log").read_text()
    assert [line for line in lines if "runs done" in line][-1].startswith("t: 3/3 runs done")


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


def test_ctrl_c_or_sigterm_stops_the_forked_runs_with_a_checkpoint_each(tiny_policy, tmp_path):
    """Ctrl-C in the pool, or `kill` (SIGTERM) of `coreward map` / `coreward demo` (turned into the same
    KeyboardInterrupt; here sent once the run has trained a step), sends SIGTERM to each forked run; the run ends its
    step, writes a checkpoint and exits 75, as `coreward train` does on SIGTERM; the pool waits for it, marks it
    stopped and raises, instead of dying and leaving its runs going in sessions of their own. The pool's SIGTERM
    handler is put back after."""
    import os
    import signal

    run_dir = tmp_path / "long"
    job = train_job(tmp_path, "long", *tiny_train_args(tiny_policy, run_dir, "--max-steps", "200",
                                                       "--set", "grpo.save_steps=1000"))
    before = signal.getsignal(signal.SIGTERM)
    sent = []

    def say(line: str) -> None:
        if last_step(run_dir) >= 1 and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt):
        run_jobs([job], 1, prefix="t", say=say, progress_every=0.2)
    assert (job.status, job.returncode) == ("stopped", 75)  # PREEMPTED_EXIT: checkpointed, try again
    log = job.log.read_text()
    assert "preempted: checkpoint of step" in log, log[-3000:]
    assert list(run_dir.glob("checkpoint-*")), sorted(p.name for p in run_dir.iterdir())
    assert job.extra == {} and last_step(run_dir) < 200
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_demos_evaluation_job_logs_its_progress_and_the_demo_line_repeats_it(tmp_path):
    """The demo's evaluation of a run (a forked job, demo/run.py `evaluation_job`) on the demo policy: its log holds
    the problems it finished with their rate (it was empty), and the demo's progress line reads its last line."""
    from coreward.data.benchmarks import load_benchmark
    from coreward.demo.run import evaluation_job, last_progress

    heldout = {"demo": load_benchmark("demo", split="test", limit=6)}
    eval_dir = tmp_path / "eval" / "demo"
    eval_dir.mkdir(parents=True)
    job = evaluation_job("demo", "demo", heldout, 2, 0, eval_dir, {})
    run_jobs([job], 1, prefix="t", say=lambda line: None)
    assert job.status == "done", job.log.read_text()[-2000:]
    logged = [line for line in job.log.read_text().splitlines() if line.startswith("generate: ")]
    assert logged and logged[-1].startswith("generate: 6/6 problems, "), job.log.read_text()[-2000:]
    assert "/s" in logged[-1] or " per problem" in logged[-1], logged[-1]
    assert job.progress() == last_progress(job.log) == logged[-1].removeprefix("generate: ")
