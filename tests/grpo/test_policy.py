"""Training with TRL's colocated vLLM engine on CPU, with a real vLLM (CI's second stage; skipped without vLLM).

Each step, TRL compares the log-probabilities vLLM reported for the sampled tokens with the trainer's own
(`sampling/sampling_logp_difference/mean`). They agree only if the engine holds the policy's current weights,
so asserting it every step is the test that weight sync works: for the policy, and for Co-rewarding-II, whose
teacher is loaded into the same engine between two policy generations and must be swapped back out. The
learning rate is raised so the weights move within a few steps and a stale layer shows. Measured here (demo
policy, lr 1e-3, 3 steps): synced 0.0019, 0.0025, 0.0027; stale output layer 0.0019, 0.0072, 0.0116. (At lr
3e-3 the policy collapses and even the synced difference reaches 0.009: too high a rate blurs the check.)
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.vllm_cpu import ROOT, requires_vllm, run_coreward


pytestmark = requires_vllm

LOGP_DIFF = "sampling/sampling_logp_difference/mean"
SYNCED = 0.006  # mean |logp_vLLM − logp_trainer| per token above which the engine does not hold the policy


def train(method: str, out: Path, steps: int = 3, env: dict | None = None, *extra: str) -> list[dict]:
    result = run_coreward(
        "train", "--config", str(ROOT / "configs" / "demo" / f"{method}.yaml"), "--output-dir", str(out),
        "--max-steps", str(steps), "--set", "grpo.use_vllm=true", "--set", "grpo.vllm_mode=colocate",
        "--set", "grpo.learning_rate=1e-3", "--set", "grpo.vllm_gpu_memory_utilization=0.1",  # on CPU: of RAM
        "--set", "data.eval=null", *extra, env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in rows if "reward" in row]  # training steps (not the run summary)
    assert [row["step"] for row in rows] == list(range(1, steps + 1))
    return rows


def test_rule_trains_with_vllm_and_its_logprobs_match_the_trainers_every_step(tmp_path):
    rows = train("rule", tmp_path / "rule")
    assert all(row[LOGP_DIFF] <= SYNCED for row in rows), [row[LOGP_DIFF] for row in rows]
    assert (tmp_path / "rule" / "final" / "model.safetensors").exists()


def test_co_rewarding_2_lora_teacher_samples_through_vllm_and_the_policy_is_restored(tmp_path):
    # transformers' generate is an error in Policy.generate: the teacher must sample through vLLM. With LoRA
    # the teacher is a second adapter of the policy, merged into the base weights on the way to vLLM. (The
    # full-copy teacher's runs are in tests/grpo/test_teacher_vllm.py.)
    rows = train("co_rewarding_2", tmp_path / "cr2", 3, {"COREWARD_TEST_FORBID_HF_GENERATE": "1"},
                 "--set", "lora.enabled=true")
    assert all(row[LOGP_DIFF] <= SYNCED for row in rows), [row[LOGP_DIFF] for row in rows]
    assert all("co_rewarding_2/teacher_accuracy" in row and row["time/teacher_generation"] > 0 for row in rows)


def test_the_logprob_check_catches_a_stale_output_layer(tmp_path):
    """Negative control: the same run with vLLM's output layer frozen at its start-up weights fails the check."""
    rows = train("rule", tmp_path / "stale", 5, {"COREWARD_TEST_STALE_OUTPUT_LAYER": "1"})
    assert rows[0][LOGP_DIFF] <= SYNCED  # step 1: the weights have not moved yet
    assert max(row[LOGP_DIFF] for row in rows) > SYNCED, [row[LOGP_DIFF] for row in rows]
