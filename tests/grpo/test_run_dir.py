"""A run directory's safety rules (grpo/run_dir.py): a finished run stays finished, one writer at a time, no silent
config change on resume, no secret on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from coreward.grpo.run_dir import REDACTED, RunLock, changed_keys, redact
from coreward.rewards.base import RewardSource
from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics
from tests.helpers.runs import REPO, coreward_here, coreward_in, tiny_train_args


PLANTED = "sk-planted-0123456789abcdef"


class KeyedReward(RewardSource):
    """A source whose parameters hold a key (as an endpoint assistant's would); it scores nothing."""

    @dataclass
    class Params:
        api_key: str = ""  # a credential that must never reach the run directory

    def compute(self, batch):
        return [0.0] * len(batch)


def test_a_finished_run_resumed_is_a_no_op_and_never_trains_past_its_steps(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    assert coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2")).returncode == 0
    final_mtime = (run_dir / "final" / "config.json").stat().st_mtime_ns
    again = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2", "--resume"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished step 2 of 2; nothing to do" in again.stdout + again.stderr
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]
    assert (run_dir / "final" / "config.json").stat().st_mtime_ns == final_mtime  # finished work untouched
    # without --resume: refused, naming the two ways on (continue it for more steps, or another directory)
    fresh = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2"))
    assert fresh.returncode == 2 and "pick another --output-dir" in fresh.stderr
    assert "already holds a run: pass --resume" in fresh.stderr and "with a larger --max-steps" in fresh.stderr


def test_resume_refuses_a_changed_config_unless_allowed(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    assert coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "1")).returncode == 0
    changed = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2", "--resume",
                                        "--set", "grpo.learning_rate=0.5", "--set", "rewards.0.name=majority"))
    assert changed.returncode == 2
    assert "grpo.learning_rate" in changed.stderr and "rewards" in changed.stderr
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1]  # nothing trained
    longer = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2", "--resume"))  # max_steps may change
    assert longer.returncode == 0, longer.stderr[-3000:]
    allowed = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "3", "--resume",
                                        "--set", "grpo.learning_rate=0.001", "--allow-config-change"))
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert (run_dir / "config.step-2.yaml").is_file() and "0.001" in (run_dir / "config.yaml").read_text()


def test_one_writer_per_run_directory_and_a_dead_holder_frees_it(tmp_path):
    run_dir = tmp_path / "run"
    with RunLock(run_dir):
        with pytest.raises(CorewardError, match=rf"is in use by .*\"pid\": {os.getpid()}"):
            with RunLock(run_dir):
                pass
    # a holder that dies of SIGKILL (no cleanup runs) leaves the directory free at once
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from coreward.grpo.run_dir import RunLock\n"
        f"lock = RunLock(Path({str(run_dir)!r})).__enter__(); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(CorewardError, match=f'"pid": {holder.pid}'):
        RunLock(run_dir).__enter__()
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with RunLock(run_dir):
        pass


def test_a_second_train_on_a_directory_in_use_fails_at_once(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    with RunLock(run_dir):
        start = time.monotonic()
        second = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "1", "--resume"))
    assert second.returncode == 2 and "is in use by" in second.stderr
    assert not (run_dir / "metrics.jsonl").exists()
    assert time.monotonic() - start < 120  # refused before any model loads (generous: shared CPUs)


def test_secrets_are_redacted_from_everything_the_run_writes(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    done = coreward_in(
        REPO, *tiny_train_args(
            tiny_policy, run_dir, "--max-steps", "1",
            "--set", "rewards=[{name: rule}, {name: 'tests.grpo.test_run_dir:KeyedReward', weight: 0.0, "
                     f"params: {{api_key: {PLANTED}}}}}]",
            "--set", f"grpo.hub_token=hf_{PLANTED}"),  # TRL pickles its args into every checkpoint
        env=dict(os.environ), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert REDACTED in (run_dir / "config.yaml").read_text()
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()]
    assert not leaks, leaks
    assert PLANTED not in done.stdout + done.stderr


def test_redaction_and_config_differences():
    config = {"rewards": [{"name": "cooper", "params": {"assistant": {"api_key": "k", "base_url": "u"}}}],
              "grpo": {"max_steps": 3, "learning_rate": 1e-6}, "hf_token": "t", "empty_token": ""}
    clean = redact(config)
    assert clean["rewards"][0]["params"]["assistant"] == {"api_key": REDACTED, "base_url": "u"}
    assert clean["hf_token"] == REDACTED and clean["empty_token"] == ""
    saved = {"grpo": {"max_steps": 3, "learning_rate": 1e-6}}
    assert changed_keys(saved, {"grpo": {"max_steps": 9, "learning_rate": 1e-6}}) == []
    assert changed_keys(saved, {"grpo": {"max_steps": 3, "learning_rate": 1e-5}}) == ["grpo.learning_rate"]
    assert Path(REPO / "configs").is_dir()


def test_a_run_whose_last_checkpoint_is_its_last_step_builds_final_without_training_on(tiny_policy, tmp_path):
    """Preempted (or killed) after the checkpoint of its last step, before final/ was written: --resume makes
    final/ from that checkpoint and logs no step past the requested ones."""
    import shutil

    run_dir = tmp_path / "run"
    assert coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2")).returncode == 0
    shutil.rmtree(run_dir / "final")
    again = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2", "--resume"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]
    assert (run_dir / "final" / "config.json").is_file() and "finished at step 2" in again.stdout + again.stderr


def test_resume_without_a_checkpoint_is_refused_naming_what_the_directory_holds(tiny_policy, tmp_path):
    typo = tmp_path / "runs" / "majorty"  # a typo in the path: it would have trained from step 0 and exited 0
    missing = coreward_here(*tiny_train_args(tiny_policy, typo, "--max-steps", "1", "--resume"))
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert f"{typo} did not exist" in missing.stderr and "--resume-if-any" in missing.stderr
    assert not typo.exists()  # the directory the lock made is not left behind
    killed = tmp_path / "killed"  # killed while its first checkpoint was written: nothing complete to resume
    (killed / "checkpoint-1").mkdir(parents=True)
    (killed / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    refused = coreward_here(*tiny_train_args(tiny_policy, killed, "--max-steps", "1", "--resume"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"no complete checkpoint in {killed}: it holds" in refused.stderr
    assert "checkpoint-1/ (incomplete" in refused.stderr and "metrics.jsonl (1 logged row)" in refused.stderr
    assert (killed / "metrics.jsonl").read_text() == '{"step": 1, "reward": 0.5}\n'  # nothing trained over it
    both = coreward_here(*tiny_train_args(tiny_policy, killed, "--resume", "--resume-if-any"))
    assert both.returncode == 2 and "pass one of them" in both.stderr


def test_resume_if_any_starts_a_run_then_continues_it(tiny_policy, tmp_path):
    """The form of a job a scheduler may start again: the first start trains from step 0, the next continues."""
    run_dir = tmp_path / "requeued"
    first = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "1", "--resume-if-any"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"no complete checkpoint in {run_dir}, starting from the beginning" in first.stdout
    again = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2", "--resume-if-any"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"--resume: continuing from {run_dir / 'checkpoint-1'}" in again.stdout
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]
