"""`coreward rm train` stopped by Ctrl-C keeps a complete checkpoint and `--resume-if-any` continues from it: a real
run of the demo RM's config (configs/rm/demo.yaml, the demo policy as backbone) on a small labelled set, in a new
process as a user runs it, with SIGINT sent to the process once its first checkpoint is complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coreward.runtime.checkpoints import last_complete_checkpoint
from coreward.runtime.files import COMPLETE_MARKER
from coreward.runtime.metrics import read_metrics
from tests.rm.test_model import rows_for, write_jsonl


REPO = Path(__file__).resolve().parents[2]
FIRST_RUN = "first_run"  # a mark the test puts on the interrupted run's rows: a restart from step 0 rewrites them


def rm_train(data: str, run_dir: Path, *extra: str) -> list[str]:
    # 320 training rows, 32 a step: 10 steps an epoch, 3 epochs; a checkpoint every 3 steps
    return [sys.executable, "-m", "coreward.cli", "rm", "train", "--config", str(REPO / "configs" / "rm" / "demo.yaml"),
            "--set", f"data.train={data}", "--set", "training.num_train_epochs=3", "--set", "training.logging_steps=1",
            "--set", "training.save_strategy=steps", "--set", "training.save_steps=3", "--output-dir", str(run_dir),
            *extra]


def test_ctrl_c_keeps_a_complete_checkpoint_and_resume_continues_from_it(tmp_path):
    from typer.testing import CliRunner

    from coreward.cli import app

    data = write_jsonl(tmp_path / "train.jsonl", rows_for(200))
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(rm_train(data, run_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
    try:
        deadline = time.monotonic() + 240
        while last_complete_checkpoint(run_dir) is None and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGINT)  # `kill -INT`; a terminal's Ctrl-C reaches the process the same way
        output, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, output[-3000:]
    kept = last_complete_checkpoint(run_dir)
    stopped = int(kept.name.rsplit("-", 1)[1])
    assert 3 <= stopped < 30 and "Traceback" not in output, output[-3000:]
    assert {"optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", COMPLETE_MARKER} <= {
        p.name for p in kept.iterdir()}  # what Trainer's resume_from_checkpoint reads
    assert "Ctrl-C: stopping after the current step" in output
    assert (f"stopped by Ctrl-C while training the RM; it stopped after step {stopped}; its checkpoint of step "
            f"{stopped} of 30 is kept") in output, output[-3000:]
    assert f"continue with: coreward rm train --config {REPO / 'configs' / 'rm' / 'demo.yaml'}" in output
    assert f"--output-dir {run_dir} --resume" in output
    assert not (run_dir / "final").exists()

    # mark the stopped run's rows: a resume from the checkpoint keeps them, a start from step 0 would rewrite them
    rows = read_metrics(run_dir / "metrics.jsonl")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({**r, FIRST_RUN: True}) + "\n" for r in rows))

    # resumed in this process, as a scheduler starts the same job again (the same command, less its start-up)
    command = rm_train(data, run_dir, "--resume-if-any")[3:]
    assert CliRunner().invoke(app, [*command, "--resume"]).exit_code == 2  # one of the two, not both
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output[-3000:]
    assert f"rm train: resuming from {kept} (step {stopped} of 30)" in result.output
    steps = [r for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in steps] == list(range(1, 31))  # each step once, the same 30 steps as a whole run
    assert [r["step"] for r in steps if r.get(FIRST_RUN)] == list(range(1, stopped + 1))  # kept, not trained again
    state = json.loads((last_complete_checkpoint(run_dir) / "trainer_state.json").read_text())
    assert state["global_step"] == state["max_steps"] == 30
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert len(list(run_dir.glob("checkpoint-*"))) == 2  # the newest two (training.save_total_limit's default)


def test_resume_refuses_a_changed_config_and_a_directory_with_nothing_to_resume(tmp_path):
    from coreward.rm.train import RMTrainConfig, resume_checkpoint
    from coreward.runtime.config import save_yaml
    from coreward.runtime.errors import CorewardError

    config = RMTrainConfig()
    config.data.train, config.output_dir = "train.jsonl", str(tmp_path)
    with pytest.raises(CorewardError, match="--resume: no complete checkpoint in"):
        resume_checkpoint(config, tmp_path, True)
    assert resume_checkpoint(config, tmp_path, "if_any") is None
    (tmp_path / "checkpoint-4").mkdir()  # a killed write: no marker, nothing to resume
    assert resume_checkpoint(config, tmp_path, "if_any") is None
    (tmp_path / "checkpoint-4" / COMPLETE_MARKER).write_text("{}")
    save_yaml(config, tmp_path / "config.yaml")
    assert resume_checkpoint(config, tmp_path, True) == tmp_path / "checkpoint-4"
    with pytest.raises(CorewardError, match="holds a checkpoint of an earlier rm train .checkpoint-4.: pass --resume"):
        resume_checkpoint(config, tmp_path, False)  # a new run there would mix its checkpoints with the old run's
    config.training = {"learning_rate": 1e-4}
    with pytest.raises(CorewardError, match=r"differs from the run's .* in training.learning_rate \(None -> 0.0001\)"):
        resume_checkpoint(config, tmp_path, True)
