"""`coreward train` end to end on a tiny policy: run directory, metrics, checkpoints, resume, bad config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coreward.grpo.checkpoints import COMPLETE_MARKER, complete_checkpoints
from coreward.grpo.config import TrainConfig
from coreward.runtime.config import load_config
from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics
from tests.helpers.runs import RULE_CONFIG, coreward, coreward_here, tiny_train_args  # noqa: F401


REPO = Path(__file__).resolve().parents[2]


def test_train_then_resume_has_each_step_once(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    first = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "2"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]
    assert [p.name for p in complete_checkpoints(run_dir)] == ["checkpoint-1", "checkpoint-2"]
    # the reward source state directory travels with each checkpoint
    assert (run_dir / "checkpoint-2" / "reward_sources" / "rule").is_dir()
    # memory.json: the measured peak (in this process: the test process's peak RSS) beside the run's plan
    memory = json.loads((run_dir / "memory.json").read_text())
    assert memory["stopped"] == "end" and memory["step"] == 2 and memory["rank"] == 0
    assert memory["measured"]["device"] == "cpu" and memory["measured"]["peak_bytes"] > 100 * 2**20
    planned = memory["planned"]
    assert planned["peak_bytes"] == max(planned["phases"].values()) == planned["phases"][planned["peak_phase"]]
    assert memory["ratio"] == pytest.approx(memory["measured"]["peak_bytes"] / planned["peak_bytes"])
    assert "memory: measured peak" in first.stdout and f"ratio {memory['ratio']:.2f}" in first.stdout
    assert "the peak resident memory of the process (peak RSS)" in first.stdout and "of cpu" not in first.stdout

    # a half-written checkpoint (no completeness marker) must never be picked
    broken = run_dir / "checkpoint-9"
    broken.mkdir()
    (broken / "trainer_state.json").write_text("{not json")
    resumed = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "3", "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        for key in ("reward", "verified_accuracy", "completions/mean_length", "frac_reward_zero_std",
                    "time/generation", "time/reward", "time/update"):
            assert key in row, (key, row)
    assert (run_dir / "final" / "config.json").is_file()
    assert (run_dir / "checkpoint-3" / COMPLETE_MARKER).is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["train_runtime"] > 0 and summary["process_cpu_s"] > 0
    # each step's row carries the compute used so far (this test's process: one process through the resume)
    cpu = [row["process_cpu_s"] for row in rows]
    assert 0 < cpu[0] < cpu[1] < cpu[2] <= summary["process_cpu_s"]
    assert (run_dir / "config.yaml").is_file()


def test_existing_run_needs_resume(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    done = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "1"))
    assert done.returncode == 2
    # no complete checkpoint there: --resume would be refused, so the way on named is --resume-if-any
    assert "already holds a run with no complete checkpoint: pass --resume-if-any" in done.stderr


@pytest.mark.parametrize(
    "override, message",
    [
        ("grpo.learning_rat=1e-6", "grpo.learning_rat"),
        ("grpo.learning_rate=fast", "grpo.learning_rate"),
        ("grpo.num_generations=1", "num_generations"),
        ("grpo.per_device_train_batch_size=12", "multiple of grpo.num_generations"),
        ("rewards.0.name=rulez", "rewards.0.name"),
        ("model.dtype=float64", "model.dtype"),
        ("data.limt=3", "data.limt"),
        ("rewards.0.params.nonsense=1", "rewards.0.params.nonsense"),
    ],
)
def test_bad_config_names_the_key(override, message):
    with pytest.raises(CorewardError, match=message.replace(".", r"\.")):
        load_config(TrainConfig, RULE_CONFIG, [override])


def test_bad_config_on_the_command_line_exits_2_before_loading_a_model(tmp_path):
    done = coreward("train", "--config", str(RULE_CONFIG), "--set", "grpo.num_generations=1",
                    "--output-dir", str(tmp_path / "r"), timeout=120)
    assert done.returncode == 2
    assert "grpo.num_generations" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "r").exists()


def test_missing_dataset_file_is_named(tmp_path):
    done = coreward_here("train", "--config", str(RULE_CONFIG), "--set", f"data.train={tmp_path / 'nope.jsonl'}",
                         "--output-dir", str(tmp_path / "r"))
    assert done.returncode == 2
    assert "nope.jsonl" in done.stderr


def test_every_shipped_config_loads(monkeypatch, tmp_path):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.plan import declared_hardware

    configs = sorted((REPO / "configs").glob("*/*.yaml"))
    train_configs = [p for p in configs if p.parent.name in ("demo", "paper", "map") and p.name != "sft.yaml"]
    assert RULE_CONFIG in train_configs
    for path in train_configs:  # in the processes it declares (`# gpus: N x ...`): its batch checks count them all
        monkeypatch.setenv("WORLD_SIZE", str(declared_hardware(path).get("gpus", 1)))
        load_config(TrainConfig, path)

    # the real model's configs: those on its VerifyRM need it built first (configs/rm/smol.yaml), and say so
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.chdir(tmp_path)  # no runs/ here
    for path in sorted((REPO / "configs" / "smol").glob("*.yaml")):
        try:
            load_config(TrainConfig, path)
        except CorewardError as error:
            assert "runs/smol_rm" in str(error) and "no such" in str(error), (path, error)


def test_progress_bar_keeps_the_latest_held_out_score():
    import io
    from types import SimpleNamespace

    from tqdm.auto import tqdm

    from coreward.runtime.metrics import CompactProgressCallback

    progress = CompactProgressCallback()
    progress.training_bar = tqdm(total=4, file=io.StringIO())  # what HF's on_train_begin sets up
    progress.current_step = 0
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    progress.on_log(None, state, None, logs={"eval/avg@4": 0.375, "eval/maj@4": 0.5})  # evaluation, logged alone
    progress.on_log(None, state, None, logs={"reward": 0.5, "verified_accuracy": 0.25, "loss": 0.1})
    assert progress.postfix == {"eval": "0.375", "reward": "0.5", "verified": "0.25"}
    assert "eval=0.375" in progress.training_bar.postfix
    assert progress.training_bar.n == 1  # step 1's training row moved the bar to step 1
    progress.training_bar.close()
