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
