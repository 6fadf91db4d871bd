"""Ctrl-C in a long phase before training: `coreward train` on an ensemble of demo RMs says first which members it
must build and how long that takes, and a SIGINT while it builds one stops it at once, as the first Ctrl-C, with
what it kept and how to continue; `kill -INT` does so even for a run started with SIGINT ignored (a script's
`coreward train ... &`). A new process, as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coreward.runtime.interrupt import Interrupted, ctrl_c_count, long_phase


REPO = Path(__file__).resolve().parents[2]


def test_kill_int_stops_a_member_build_as_the_first_ctrl_c_and_says_how_to_go_on(tmp_path):
    env = {**os.environ, "COREWARD_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "coreward.cli", "train", "--config", str(REPO / "configs" / "demo" / "ensemble_min.yaml"),
         "--output-dir", str(tmp_path / "run"), "--max-steps", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as a shell script starts `cmd &`
    lines, sent = [], None
    try:
        for line in process.stdout:
            lines.append(line)
            if "building the demo RM's ensemble member demo:1" in line and sent is None:
                os.kill(process.pid, signal.SIGINT)
                sent = time.monotonic()
        process.wait(timeout=60)
    finally:
        process.kill()
    output = "".join(lines)
    assert sent is not None, output[-3000:]
    assert process.returncode == 130 and time.monotonic() - sent < 30, output[-3000:]
    announced = output.index("2 model(s) must be built before training starts (demo:1, demo:2): about 30 minutes")
    assert announced < output.index("building the demo RM's ensemble member demo:1")  # said before it starts
    assert "to build them ahead of time: python -m coreward.demo.rm ensemble demo:1 demo:2" in output
    assert "stopped by Ctrl-C while building the demo RM's ensemble member demo:1" in output  # (its sampling, or
    assert "run the same command again to go on" in output  # before it: the line says which, and what it kept)
    assert "second Ctrl-C" not in output and "Traceback" not in output


def test_a_phase_names_what_it_stopped_and_the_innermost_phase_says_what_it_kept():
    received = ctrl_c_count()  # the process's count so far (an earlier test in this worker may have sent SIGINTs)
    with pytest.raises(Interrupted) as stopped:
        with long_phase("building a model", "nothing is kept"), long_phase("training it", "its samples are kept"):
            raise KeyboardInterrupt
    assert stopped.value.line() == "stopped by Ctrl-C while training it; its samples are kept"
    assert ctrl_c_count() == received  # a KeyboardInterrupt raised in code is no SIGINT received


def test_a_members_kept_samples_are_not_drawn_again(tmp_path, monkeypatch):
    from coreward.demo import rm

    (tmp_path / "verification.jsonl").write_text('{"question": "1+1=", "reference_answer": "2", "completion": "2"}\n')
    (tmp_path / rm.ANNOTATION_FILE).write_text(json.dumps({"sampled": 1}))

    def no_sampling(*args, **kwargs):
        raise AssertionError("the kept samples were drawn again")

    monkeypatch.setattr(rm, "sample_demo_rows", no_sampling)
    assert rm.sampled_rows(1, rm.member_recipe(1), tmp_path) == {"sampled": 1}
