"""Co-rewarding-II's teacher in the colocated vLLM engine samples with the teacher's weights (real vLLM, CPU).

The teacher's EMA weights are loaded into the policy's engine for its rollouts and the policy's put back after
(checked here and in tests/grpo/test_policy.py through the log-probability match). Here: a frozen teacher
(α = 0, θ₀ throughout) and a tracking one (α = 1, the policy of the step before) sample near-greedily
(temperature 1e-3, so the rollouts are a function of the weights): the same rollouts at the first step, where
both teachers are θ₀, different ones later. An engine that kept the policy's weights for the teacher, or never
received the teacher's new ones, gives the two runs the same teacher rollouts.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.grpo.test_policy import LOGP_DIFF, SYNCED, train
from tests.helpers.vllm_cpu import requires_vllm


pytestmark = requires_vllm


def dumped(run_dir: Path, step: int) -> list[list[str]]:
    lines = (run_dir / "teacher" / f"step_{step}.jsonl").read_text().splitlines()
    return [json.loads(line)["teacher_completions"] for line in lines]


def test_a_frozen_and_a_tracking_teacher_sample_differently_through_vllm(tmp_path):
    runs = {}
    for name, alpha in (("frozen", 0.0), ("tracking", 1.0)):
        run_dir = tmp_path / name
        rows = train("co_rewarding_2", run_dir, 3, {"COREWARD_TEST_FORBID_HF_GENERATE": "1"},
                     "--set", f"rewards.0.params.alpha_start={alpha}", "--set", f"rewards.0.params.alpha_end={alpha}",
                     "--set", "rewards.0.params.temperature=0.001", "--set", f"rewards.0.params.dump_dir={run_dir / 'teacher'}")
        assert all(row[LOGP_DIFF] <= SYNCED for row in rows), [row[LOGP_DIFF] for row in rows]  # policy put back
        assert all("co_rewarding_2/teacher_accuracy" in row and row["time/teacher_generation"] > 0 for row in rows)
        runs[name] = run_dir
    assert dumped(runs["frozen"], 0) == dumped(runs["tracking"], 0)  # both teachers are θ₀ at the first step
    assert dumped(runs["frozen"], 2) != dumped(runs["tracking"], 2)  # θ₀ vs the policy after two steps
