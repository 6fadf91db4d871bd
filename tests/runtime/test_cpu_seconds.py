"""A run's CPU seconds (runtime/metrics.py `process_cpu_seconds`, written to summary.json): its own and those of its
child processes, ended or still running, counted; the figure the fair comparisons add up (`coreward compare --heldout`)."""

from __future__ import annotations

import subprocess
import sys

from coreward.runtime.metrics import process_cpu_seconds


BUSY = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\nprint('done', flush=True)\ntime.sleep(60)"


def test_an_ended_child_and_a_running_child_are_both_counted():
    before = process_cpu_seconds()
    subprocess.run([sys.executable, "-c", BUSY.format(s=0.6).replace("time.sleep(60)", "")], check=True)
    after_ended = process_cpu_seconds()
    assert after_ended - before >= 0.5  # the ended child's 0.6 s of CPU (reaped: RUSAGE_CHILDREN)

    running = subprocess.Popen([sys.executable, "-c", BUSY.format(s=0.6)], stdout=subprocess.PIPE, text=True)
    try:
        assert running.stdout.readline().strip() == "done"  # it has burnt its 0.6 s and now sleeps, alive
        assert process_cpu_seconds() - after_ended >= 0.5
    finally:
        running.kill()
        running.wait()


def test_a_running_childs_ended_child_is_counted():
    """A forkserver's verifier workers are our grandchildren: once one ends, its parent (alive) has reaped it, so its
    CPU is in no RUSAGE of ours, only in the parent's children's times. It must be counted there, or the figure falls
    back when a worker ends."""
    parent_code = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {BUSY.format(s=0.6).replace('time.sleep(60)', '')!r}], check=True)\n"
        "print('reaped', flush=True)\ntime.sleep(60)"
    )
    before = process_cpu_seconds()
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "done"  # the grandchild's own line
        assert parent.stdout.readline().strip() == "reaped"  # ended and reaped by its still-running parent
        assert process_cpu_seconds() - before >= 0.5
    finally:
        parent.kill()
        parent.wait()


def test_a_resumed_run_counts_on_from_its_checkpoints_row(tmp_path):
    """A run resumed from checkpoint-1 keeps metrics.jsonl's rows to step 1; its next rows and summary.json count
    on from step 1's CPU-seconds (what the kept steps cost in the attempt that ran them), not from zero. A fresh run
    (step 0) in the same folder starts from zero."""
    import json
    from types import SimpleNamespace

    from coreward.runtime.metrics import MetricsFileCallback, read_metrics

    earlier = 1e6  # far above what this process can have used, so only the offset can reach it
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 1.0, "process_cpu_s": earlier}) + "\n"
                                            + json.dumps({"step": 2, "loss": 0.5, "process_cpu_s": 2 * earlier}) + "\n")
    callback = MetricsFileCallback(tmp_path)
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    callback.on_train_begin(None, state, None)
    state.global_step = 2
    callback.on_log(None, state, None, logs={"loss": 0.4})
    callback.flush()
    callback.on_log(None, state, None, logs={"train_runtime": 3.0})  # the end-of-run summary
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2] and rows[1]["loss"] == 0.4  # step 2 trained again, once
    for value in (rows[1]["process_cpu_s"], json.loads((tmp_path / "summary.json").read_text())["process_cpu_s"]):
        assert earlier < value <= earlier + process_cpu_seconds()

    fresh = MetricsFileCallback(tmp_path)
    fresh.on_train_begin(None, SimpleNamespace(is_world_process_zero=True, global_step=0), None)
    assert fresh.cpu_seconds() < earlier
