"""Each method's invariants watched while it trains (issue 38, item 2), each fault made to happen for real in a short
run: Cooper's assistant endpoint (a local HTTP server) stops answering mid-run; Cooper's RM is frozen (a bfloat16
RM without float32 masters at a learning rate its updates round away at); Co-rewarding-II's teacher shares the
policy's tensors; Co-rewarding-I's pairs are split across batches. Each run's warning and its health summary
(health.json, printed at the end) are asserted, beside a healthy run where it tells them apart."""

from __future__ import annotations

import json

import pytest
from transformers import TrainerCallback

from coreward.grpo.config import TrainConfig
from coreward.runtime.config import load_config
from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics
from tests.helpers.llm_test_server import LLMTestServer
from tests.helpers.runs import REPO


pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = ["data.limit=4", "data.eval_every=0", "grpo.num_generations=4", "grpo.per_device_train_batch_size=8",
         "grpo.max_completion_length=24", "grpo.save_steps=100", "torch_threads=1"]
WRONG_SOLUTION = "1+1=2;2-1=1;#### 99999"  # the assistant's negative: an answer no demo problem has


def train(config: str, policy, run_dir, steps: int, *settings: str, callbacks=()):
    from coreward.grpo.train import run_training

    overrides = [f"model.name_or_path={policy}", *SMALL, *settings]
    config = load_config(TrainConfig, REPO / "configs" / "demo" / f"{config}.yaml", overrides)
    run_training(config, output_dir=str(run_dir), max_steps=steps, extra_callbacks=list(callbacks))
    return json.loads((run_dir / "health.json").read_text()), read_metrics(run_dir / "metrics.jsonl")


class StopServerAfter(TrainerCallback):
    """Stops the assistant's server (its port closes: requests are refused) once `step` steps are done."""

    def __init__(self, server: LLMTestServer, step: int):
        self.server, self.step = server, step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step and not self.server.stopping.is_set():
            self.server.__exit__(None, None, None)


def test_cooper_whose_assistant_stops_answering_mid_run_says_its_rm_stopped_learning(memorized_policy, tmp_path,
                                                                                     capsys):
    with LLMTestServer(reply=lambda prompt: WRONG_SOLUTION) as server:
        assistant = (f"{{backend: openai, base_url: '{server.url}', model: test-model, max_retries: 0, "
                     "timeout_s: 5, deadline_s: 10}")
        health, rows = train("cooper", memorized_policy, tmp_path / "run", 6, f"rewards.0.params.assistant={assistant}",
                             "rewards.0.params.eval_every=0", callbacks=[StopServerAfter(server, 1)])
    printed = capsys.readouterr().out
    # step 1: the endpoint answered, the pairs were valid and the RM moved; steps 2-6: every request refused
    assert rows[0]["rm/valid_pair_rate"] > 0 and rows[0]["rm/update_norm"] > 0
    assert all(row["rm/valid_pair_rate"] == 0 and row["assistant/failures"] > 0 for row in rows[1:])
    warning = ("step 6: for 5 steps in a row Cooper has had no valid pair, so its RM has not learned: assistant "
               "failures")
    assert warning in printed and any(line.startswith(f"warning: {warning}") for line in health["warnings"])
    line = ("Cooper: RM updated on 1 of 6 steps; steps with no valid pair: 5; 5 × assistant failures (its requests "
            "came back empty")
    assert any(found.startswith(line) for found in health["lines"]), health["lines"]
    assert f"health: {line}" in printed
    assert not any("did not move" in w for w in health["warnings"])  # a moving RM is not called frozen


def test_a_frozen_cooper_rm_is_called_out_at_once(memorized_policy, tmp_path, capsys):
    health, rows = train("cooper", memorized_policy, tmp_path / "run", 2, "rewards.0.params.eval_every=0",
                         "rewards.0.params.rm_dtype=bfloat16", "rewards.0.params.master_weights=none",
                         "rewards.0.params.lr=1e-9")
    with_pairs = [row for row in rows if "rm/loss" in row]
    # AdamW steps of ~1e-9 on bfloat16 weights spaced ~1e-4 apart round away: the weights do not change
    assert with_pairs and all(row["rm/update_norm"] <= 1e-9 * row["rm/weight_norm"] for row in with_pairs)
    first = with_pairs[0]["step"]
    assert f"warning: step {first}: Cooper's RM did not move in its update although the step had pairs" in \
        capsys.readouterr().out
    assert health["rm_updates"] == 0 and health["rm_frozen"] == len(with_pairs)
    assert any(line.startswith("Cooper: RM updated on 0 of 2 steps") and
               f"left the RM unchanged (frozen): {len(with_pairs)}" in line for line in health["lines"]), health["lines"]


def test_a_teacher_that_is_the_policy_stops_the_run(memorized_policy, tmp_path, monkeypatch):
    # the healthy run first: its teacher is a model of its own, and drifts away from the moving policy
    healthy, rows = train("co_rewarding_2", memorized_policy, tmp_path / "healthy", 2, "grpo.learning_rate=1e-3")
    distances = [row["co_rewarding_2/teacher_distance"] for row in rows]
    assert distances[0] == pytest.approx(0, abs=1e-6) and distances[1] > 0, distances
    assert any(line.startswith("Co-rewarding-II: teacher–policy weight distance") for line in healthy["lines"])
    # the bug: the "copy" is the policy itself, so the teacher's tensors are the policy's
    monkeypatch.setattr("coreward.rewards.co_rewarding_2.ema_teacher.own_copy", lambda model: model)
    with pytest.raises(CorewardError, match=r"before step 1 the EMA teacher's weights equal the policy's"):
        train("co_rewarding_2", memorized_policy, tmp_path / "aliased", 3, "grpo.learning_rate=1e-3")
    health = json.loads((tmp_path / "aliased" / "health.json").read_text())
    assert health["steps"] == 1 and health["teacher_distance"]["last"]["value"] == 0.0
    assert health["error"].startswith("after 1 completed steps: co_rewarding_2: before step 1 the EMA teacher's")
    assert any(line.startswith("stopped by an error: after 1 completed steps") for line in health["lines"])


def test_co_rewarding_1_pairs_split_across_batches_are_counted(tiny_policy, tmp_path, monkeypatch, capsys):
    # the bug: the trainer does not see paired views, so TRL's sampler draws rows one by one, and a question's
    # rephrasing lands in another batch (3 steps of 2 random rows of 8: both rows one pair in all 3 with chance 1/343)
    monkeypatch.setattr("coreward.grpo.trainer.has_paired_views", lambda dataset: False)
    health, rows = train("co_rewarding_1", tiny_policy, tmp_path / "run", 3)
    split = [row["step"] for row in rows if row["co_rewarding_1/unpaired_groups"] > 0]
    assert split, rows
    assert (f"warning: step {split[0]}: " in capsys.readouterr().out
            and any("had no other view of their problem in the batch" in w for w in health["warnings"]))
    assert (f"Co-rewarding-I: steps with a pair's other view missing from the batch: {len(split)} of 3"
            in health["lines"])
