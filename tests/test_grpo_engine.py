"""The GRPO engine: reward sources see whole groups on one process and on two (torchrun, gloo, CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coreward.rewards.base import RolloutBatch

WORKER = Path(__file__).parent / "grpo_probe_worker.py"
G = 4


def run_worker(model: Path, out: Path, nproc: int, per_device: int, steps: int = 2,
               reward: str = "length_rank_probe") -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    if nproc == 1:
        cmd = [sys.executable, str(WORKER), str(model), str(out), str(steps), str(per_device), reward]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", "29517", str(WORKER), str(model), str(out), str(steps), str(per_device), reward]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def trl_group_advantages(rewards: list[float], group: int) -> list[float]:
    """TRL's group normalization, written out: (r - mean_g) / (std_g + 1e-4), Bessel-corrected std."""
    r = torch.tensor(rewards).view(-1, group)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True)
    return ((r - mean) / (std + 1e-4)).view(-1).tolist()


def check_run(results: list[dict], steps: int, per_device: int) -> None:
    world = len(results)
    for rank_result in results:
        assert rank_result["world"] == world
        assert len(rank_result["calls"]["length_rank_probe"]) == steps
    for step in range(steps):
        calls = [r["calls"]["length_rank_probe"][step] for r in results]
        # every process's source saw the same, whole global batch
        for call in calls[1:]:
            assert call["completion_ids"] == calls[0]["completion_ids"]
            assert call["ids"] == calls[0]["ids"]
        call = calls[0]
        n = len(call["ids"])
        assert n == per_device * world
        # each group: G rows, one prompt, each completion exactly once
        for g in range(n // G):
            rows = range(g * G, (g + 1) * G)
            assert {call["group_ids"][i] for i in rows} == {g}
            assert len({call["ids"][i] for i in rows}) == 1
        assert sorted(set(call["group_ids"])) == list(range(n // G))
        # the rewards are the right group-level values for that batch
        from tests.grpo_probe_worker import length_ranks

        batch = RolloutBatch(prompts=call["prompts"], completions=[""] * n, completion_ids=call["completion_ids"],
                             group_ids=call["group_ids"], num_generations=G, columns={})
        assert call["rewards"] == pytest.approx(length_ranks(batch))
        # each process's advantages are its slice of the single-process normalization of the global batch
        expected = trl_group_advantages(call["rewards"], G)
        got = [a for r in results for a in r["advantages"][step]]
        assert got == pytest.approx(expected, abs=1e-5)


def test_single_process_groups_and_advantages(tiny_policy, tmp_path):
    check_run(run_worker(tiny_policy, tmp_path, nproc=1, per_device=8), steps=2, per_device=8)


def test_two_processes_see_whole_groups(tiny_policy, tmp_path):
    # 6 rows per process with G=4: the second group straddles the two processes
    check_run(run_worker(tiny_policy, tmp_path, nproc=2, per_device=6), steps=2, per_device=6)
