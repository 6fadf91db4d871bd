"""Co-rewarding-II's teacher under ZeRO-3 and FSDP2 (2 gloo processes on CPU) samples with its own weights.

Sharded, the teacher is TRL's reference model, sharded like the policy; its rollouts go through its own
forward hooks. A frozen teacher (α = 0: θ₀ throughout) and a tracking one (α = 1: the policy of the step
before), sampling near-greedily (temperature 1e-3, so rollouts are a function of the weights), give the same
rollouts at the first step, where both are θ₀, and different ones at the third. A teacher that sampled with
the policy's weights, or never received the average, would give the two runs the same rollouts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.grpo.test_sharded import ACCELERATE, REPO, needs_deepspeed
from tests.helpers.kill_resume import launch, train_command


def dumped(run_dir: Path, step: int) -> list[list[str]]:
    lines = (run_dir / "teacher" / f"step_{step}.jsonl").read_text().splitlines()
    return [json.loads(line)["teacher_completions"] for line in lines]


@pytest.mark.parametrize("engine", [pytest.param("zero3", marks=needs_deepspeed), "fsdp2"])
def test_a_sharded_frozen_and_tracking_teacher_sample_differently(engine, memorized_policy, tmp_path, monkeypatch):
    # a length reward beside the teacher's makes sure the policy moves from the first step on
    monkeypatch.setenv("PYTHONPATH", f"{REPO / 'src'}{os.pathsep}{REPO}")
    config = tmp_path / "config.yaml"
    config.write_text(f"base: {REPO / 'configs' / 'demo' / 'rule.yaml'}\nrewards:\n"
                      f"  - name: tests.rewards.test_teacher_behaviour:length_reward\n"
                      f"  - name: co_rewarding_2\n    params: {{as_reference: true, temperature: 0.001}}\n")
    runs = {}
    for name, alpha in (("frozen", 0.0), ("tracking", 1.0)):
        run_dir = tmp_path / name
        settings = [f"model.name_or_path={memorized_policy}", "data.limit=8", "data.eval_every=0",
                    "grpo.num_generations=4", "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=16",
                    "grpo.save_steps=100", "grpo.learning_rate=1e-2", "grpo.beta=0.01", "torch_threads=1",
                    f"rewards.1.params.alpha_start={alpha}", f"rewards.1.params.alpha_end={alpha}",
                    f"rewards.1.params.dump_dir={run_dir / 'teacher'}"]
        done = launch(train_command(config, run_dir, settings, 3, resume=False,
                                    accelerate_config=ACCELERATE / f"{engine}_cpu.yaml"), run_dir)
        assert done.returncode == 0, done.log[-3000:]
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert rows[0]["grad_norm"] > 0  # the policy moved
        # ‖θ − θ_T‖ summed over the shards: 0 for the teacher that is the policy of the step before (α = 1); for the
        # frozen one θ₀ at the first step, then as far as the policy has moved from θ₀ (a teacher equal to a moved
        # policy with α < 1 would have stopped the run)
        distances = [row["co_rewarding_2/teacher_distance"] for row in rows if "co_rewarding_2/teacher_distance" in row]
        assert len(distances) == 3
        assert distances == [0.0] * 3 if alpha == 1.0 else (distances[0] < 1e-6 and min(distances[1:]) > 1e-4)
        runs[name] = run_dir
    assert dumped(runs["frozen"], 0) == dumped(runs["tracking"], 0)  # both teachers are θ₀ at the first step
    assert dumped(runs["frozen"], 2) != dumped(runs["tracking"], 2)  # θ₀ vs the policy after two steps
