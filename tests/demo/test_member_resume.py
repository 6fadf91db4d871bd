"""A demo ensemble member's build stopped by Ctrl-C while it trains keeps its training's checkpoint, and the same
build again resumes from it, saying so. The member's recipe as `build_demo_rm_member` runs it, on a smaller data
set: its sampled rows are given (as a stopped build leaves them) and its training is 3 epochs of 10 steps, not 8 of
the full set's; the RM, the training, the checkpoints, the evaluation and the probe are real."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from coreward.demo import rm as demo_rm
from coreward.rm.train import RMTrainConfig
from coreward.runtime.checkpoints import checkpoint_step, last_complete_checkpoint
from coreward.runtime.interrupt import Interrupted, catch_ctrl_c
from coreward.runtime.metrics import read_metrics
from tests.rm.test_model import rows_for, write_jsonl


FULL_CONFIG = demo_rm.demo_config


def small_config(train_file, output_dir, seed=0, epochs=8) -> RMTrainConfig:
    """The member's training config for a smaller set: 3 epochs of 10 steps, a checkpoint every 3 steps."""
    config = FULL_CONFIG(train_file, output_dir, seed=seed, epochs=3)
    config.training.update(logging_steps=1, save_strategy="steps", save_steps=3)
    return config


def test_a_members_build_stopped_while_training_resumes_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    member = tmp_path / "member"
    member.mkdir()
    write_jsonl(member / "verification.jsonl", rows_for(200))  # 320 training rows after the held-out fifth
    (member / demo_rm.ANNOTATION_FILE).write_text(json.dumps({"sampled": 400}))  # the sampling is done
    truth = write_jsonl(tmp_path / "truth_eval.jsonl", rows_for(20))
    monkeypatch.setattr(demo_rm, "demo_config", small_config)
    monkeypatch.setattr(demo_rm, "ensure_truth_eval", lambda: truth)

    catch_ctrl_c()  # as every coreward command does
    run_dir = member / "run"

    def ctrl_c_after_the_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if run_dir.is_dir() and last_complete_checkpoint(run_dir) is not None:
                os.kill(os.getpid(), signal.SIGINT)  # to this process: its main thread handles it
                return
            time.sleep(0.02)

    sender = threading.Thread(target=ctrl_c_after_the_first_checkpoint, daemon=True)
    sender.start()
    try:
        with pytest.raises(Interrupted) as stopped:
            demo_rm.build_demo_rm_member(1, member)
    finally:
        sender.join()  # the handler this process had before comes back with conftest's fixture
    kept = last_complete_checkpoint(run_dir)
    step = checkpoint_step(kept)
    assert 3 <= step < 30
    line = stopped.value.line()
    assert line.startswith(f"stopped by Ctrl-C while training the demo RM's ensemble member demo:1; it stopped after "
                           f"step {step}; its checkpoint of step {step} of 30 is kept"), line
    assert line.endswith(f"is kept ({kept}); its sampled completions are kept in {member}; run the same command again "
                         "to go on"), line
    assert not (member / "member.json").exists()
    capsys.readouterr()
    # mark the stopped training's rows: a resume keeps them, a training started over would rewrite them
    rows = read_metrics(run_dir / "metrics.jsonl")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({**r, "first_run": True}) + "\n" for r in rows))

    summary = demo_rm.build_demo_rm_member(1, member)  # the same build again
    err = capsys.readouterr().err
    assert f"demo:1: its sampled completions are kept from a stopped build ({member})" in err
    assert f"demo:1: its training resumes from step {step}, kept from a stopped build ({kept})" in err
    steps = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    assert steps == list(range(1, 31))  # each step once: the first `step` kept, the rest trained after them
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if r.get("first_run") and "loss" in r] == \
        list(range(1, step + 1))
    assert summary["annotation"] == {"sampled": 400} and "accuracy" in summary["truth_eval"]
    assert (member / "member.json").is_file() and (run_dir / "final" / "model.safetensors").is_file()
