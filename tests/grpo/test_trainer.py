"""The GRPO engine: reward sources see whole groups on one process and on two (torchrun, gloo, CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from coreward.rewards.base import RolloutBatch
from tests.helpers.grpo_probe import G, run_worker


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
        from tests.helpers.grpo_probe_worker import length_ranks

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


def test_every_stateless_reward_source_trains_on_two_processes(memorized_policy, tiny_rm_path, tmp_path, verifier):
    """`coreward train` under torchrun (2 processes, gloo) with Co-rewarding-I's paired batches and the static
    RM, majority, self-certainty, entropy and a local model as the judge (sampling its replies) side by side,
    periodic evaluation on: it runs to the end, the judge is asked on every step, both
    processes score the same whole batch, and each reward it logged is what the method gives on that batch in one
    process (a recording source writes the batch out); the first step's self-certainty and entropy are worked out
    here from the initial policy's logits. (Cooper and Co-rewarding-II have two-process tests of their own.)"""
    import json
    import math

    from transformers import AutoModelForCausalLM

    from coreward.rewards.co_rewarding_1 import CrossViewReward
    from coreward.rewards.majority import MajorityVoteReward
    from coreward.rewards.model import ModelReward
    from coreward.runtime.metrics import read_metrics
    from tests.helpers.kill_resume import launch, train_command

    sources = ["co_rewarding_1", "model", "majority", "self_certainty", "entropy"]  # recomputed below
    config = tmp_path / "all_sources.yaml"
    records = tmp_path / "batches"
    config.write_text(
        f"base: {Path(__file__).resolve().parents[2] / 'configs' / 'demo' / 'co_rewarding_1.yaml'}\n"
        "rewards:\n  - {name: co_rewarding_1, params: {match: verified, rephrasings: demo}}\n"
        f"  - {{name: model, params: {{path: {tiny_rm_path}}}}}\n"
        "  - {name: majority}\n  - {name: self_certainty, weight: 0.1}\n  - {name: entropy, weight: 0.1}\n"
        # a local model as the judge, sampling its replies (llm/hf_local.py's row sampler) on the main process
        f"  - {{name: judge, weight: 0.1, params: {{judge: {memorized_policy}, temperature: 0.7, max_tokens: 4}}}}\n"
        f"  - {{name: 'tests.helpers.user_rewards:BatchRecorder', params: {{out: '{records}'}}}}\n"
    )
    overrides = [f"model.name_or_path={memorized_policy}", "data.limit=4", "data.eval_every=2", "data.eval_limit=4",
                 "grpo.num_generations=4", "grpo.per_device_train_batch_size=4", "grpo.max_completion_length=24",
                 "grpo.learning_rate=1e-3", "torch_threads=1"]
    run_dir = tmp_path / "run"
    attempt = launch(train_command(config, run_dir, overrides, 2, resume=False, nproc=2), run_dir)
    assert attempt.returncode == 0, attempt.log[-3000:]
    initial_eval, *rows = read_metrics(run_dir / "metrics.jsonl")
    assert initial_eval["step"] == 0 and "eval/avg@4" in initial_eval  # the warm start, evaluated first
    assert [row["step"] for row in rows] == [1, 2]
    assert "eval/avg@4" in rows[1]
    # the judge was asked about every rollout on both steps (its sampled replies may say neither YES nor NO: then
    # they count as failures and score incorrect, and the run goes on)
    assert all(row["judge/judged"] == 8 and row["judge/calls"] >= 1 for row in rows), rows
    assert all(0.0 <= row["rewards/judge/mean"] <= 1.0 for row in rows)

    seen = [[json.loads(line) for line in (records / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)]
    assert seen[0] == seen[1] and [b["step"] for b in seen[0]] == [0, 1]  # every process: the same whole batch
    policy = AutoModelForCausalLM.from_pretrained(memorized_policy).eval()
    for row, b in zip(rows, seen[0]):
        batch = RolloutBatch(prompts=b["prompts"], completions=b["completions"], completion_ids=b["completion_ids"],
                             group_ids=b["group_ids"], num_generations=b["num_generations"], columns=b["columns"],
                             step=b["step"], reference_column=b["reference_column"], prompt_ids=b["prompt_ids"],
                             token_stats=b["token_stats"], context={"verifier": verifier})
        assert len(batch) == 8 and sorted(set(batch.columns["view"])) == [0, 1]
        rewards = {"co_rewarding_1": CrossViewReward(match="verified").compute(batch),
                   "majority": MajorityVoteReward().compute(batch),
                   "model": ModelReward(path=str(tiny_rm_path), device="cpu").compute(batch),
                   "self_certainty": b["token_stats"]["self_certainty"],
                   "entropy": [-h for h in b["token_stats"]["entropy"]]}
        assert all(r in (0.0, 1.0) for name in ("co_rewarding_1", "majority") for r in rewards[name])
        assert all(0 < r < 1 for r in rewards["model"])  # σ of a logit
        assert all(r >= 0 for r in rewards["self_certainty"])  # KL(U ‖ p) ≥ 0
        assert all(r <= 0 for r in rewards["entropy"])  # minus an entropy
        for source in sources:
            logged = row[f"rewards/{source}/mean"]
            assert logged == pytest.approx(sum(rewards[source]) / len(batch), rel=1e-4, abs=1e-6), (row["step"], source)
    # step 1 sampled from the initial policy: its token statistics, from the definition, one completion at a time
    first = seen[0][0]
    for i, (prompt, completion) in enumerate(zip(first["prompt_ids"], first["completion_ids"])):
        with torch.no_grad():
            logits = policy(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1].double()
        logp = torch.log_softmax(logits, dim=-1)
        entropy = -(logp.exp() * logp).sum(-1).mean().item()
        self_certainty = (-math.log(logp.shape[-1]) - logp.mean(-1)).mean().item()
        assert first["token_stats"]["entropy"][i] == pytest.approx(entropy, abs=1e-4), i
        assert first["token_stats"]["self_certainty"][i] == pytest.approx(self_certainty, abs=1e-4), i


# ---------------------------------------------------------------------------------- per-view loss (Co-rewarding-I)
def test_split_views_gives_each_view_its_own_rows_and_shares_the_rest():
    from coreward.grpo.trainer import split_views

    views = torch.tensor([0, 1, 1, 0, 1])
    inputs = {"view": views, "completion_mask": torch.arange(10).reshape(5, 2), "advantages": torch.arange(5.0),
              "num_items_in_batch": torch.tensor(7), "images": None}
    parts = dict(split_views(inputs))
    assert sorted(parts) == [0, 1]
    assert parts[0]["advantages"].tolist() == [0.0, 3.0] and parts[1]["advantages"].tolist() == [1.0, 2.0, 4.0]
    assert parts[1]["completion_mask"].tolist() == [[2, 3], [4, 5], [8, 9]]
    assert parts[0]["num_items_in_batch"] is inputs["num_items_in_batch"] and parts[1]["images"] is None
    # bnpo on a view's rows is that view's token mean; the sum over views is the authors' Σ_v Σ_{t∈v} ℓ_t / N_v
    loss, mask = torch.randn(5, 2), torch.tensor([[1, 1], [1, 0], [1, 1], [0, 1], [1, 1]])
    per_view = sum((loss[views == v] * mask[views == v]).sum() / mask[views == v].sum() for v in (0, 1))
    joint = (loss * mask).sum() / mask.sum()
    assert not torch.isclose(per_view, joint)  # the two aggregations differ


def check_per_view_loss_on_a_fixed_batch(trainer) -> None:
    """The trainer's loss on a hand-made micro-batch against Co-rewarding-I's per-view loss written out here:
    Σ_v Σ_{i∈v,t} ℓ_it·m_it / Σ_{i∈v,t} m_it with ℓ = −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A) (PPO-clip, β = 0), the
    ratios ρ = exp(δ) set through the old log-probabilities. The two views have different token counts, so one token
    mean over both (TRL's bnpo alone) gives another number."""
    model = trainer.model
    model.eval()  # no dropout; the loss of one micro-batch, no gradient-accumulation scaling
    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt_ids = torch.randint(4, vocab, (6, 5), generator=generator)
    completion_ids = torch.randint(4, vocab, (6, 6), generator=generator)
    completion_mask = torch.tensor([[1] * 6, [1, 1, 0, 0, 0, 0], [1] * 5 + [0], [1, 1, 1, 0, 0, 0], [1] * 6, [1, 0, 0, 0, 0, 0]])
    views = torch.tensor([0, 1, 1, 0, 0, 1])
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5, 0.5, -1.0])
    delta = (torch.rand(6, 6, generator=generator) - 0.5) * 0.8  # ratios 0.67 to 1.49: some clipped, some not
    with torch.no_grad():
        logps = trainer._get_per_token_logps_and_entropies(model, torch.cat([prompt_ids, completion_ids], 1),
                                                           torch.ones(6, 11, dtype=torch.long), 6)[0]
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": advantages, "old_per_token_logps": logps - delta,
              "view": views, "num_items_in_batch": completion_mask.sum()}
    with torch.no_grad():
        loss = trainer.compute_loss(model, inputs).item()

    ratio = delta.exp()
    A = advantages[:, None]
    per_token = -torch.minimum(ratio * A, ratio.clamp(1 - trainer.epsilon_low, 1 + trainer.epsilon_high) * A)
    mask = completion_mask.float()
    per_view = sum(((per_token * mask)[views == v].sum() / mask[views == v].sum()).item() for v in (0, 1))
    joint = ((per_token * mask).sum() / mask.sum()).item()
    assert trainer.beta == 0 and abs(per_view - joint) > 0.1  # this batch tells the two aggregations apart
    assert loss == pytest.approx(per_view, abs=1e-5), (loss, per_view, joint)


def test_per_view_loss_runs_with_both_views_in_each_micro_batch(tmp_path, monkeypatch):
    from coreward.grpo import trainer as trainer_module
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.errors import CorewardError
    from coreward.runtime.metrics import read_metrics

    config_path = Path(__file__).resolve().parents[2] / "configs" / "demo" / "co_rewarding_1.yaml"
    seen = []
    original = trainer_module.split_views

    def recording(inputs):
        parts = original(inputs)
        seen.append([(view, part["view"].unique().tolist(), len(part["view"])) for view, part in parts])
        return parts

    monkeypatch.setattr(trainer_module, "split_views", recording)
    config = load_config(TrainConfig, config_path, ["rewards.0.params.view_loss=per_view", "grpo.loss_type=bnpo", "data.eval_every=0",
                                                    "grpo.save_steps=100", "torch_threads=1"])
    result = run_training(config, output_dir=str(tmp_path / "run"), max_steps=2)
    assert seen and all([v for v, _, _ in parts] == [0, 1] for parts in seen)  # both views in each micro-batch
    assert all(values == [view] for parts in seen for view, values, _ in parts)  # each part holds one view's rows
    assert all(sum(n for _, _, n in parts) == config.grpo["per_device_train_batch_size"] for parts in seen)
    logged = [row for row in read_metrics(tmp_path / "run" / "metrics.jsonl") if "loss/view0" in row]
    assert len(logged) == 2  # the view-split metrics, every step
    for name in ("loss", "entropy", "clip_ratio/region_mean"):
        assert all(f"{name}/view0" in row and f"{name}/view1" in row for row in logged), name
    for row in logged:  # the loss the run trained on is the sum of the two views' losses
        assert row["loss"] == pytest.approx(row["loss/view0"] + row["loss/view1"], rel=1e-4, abs=1e-7), row
    check_per_view_loss_on_a_fixed_batch(result.trainer)
    with pytest.raises(CorewardError, match="grpo.loss_type: bnpo"):
        load_config(TrainConfig, config_path, ["rewards.0.params.view_loss=per_view"])
    with pytest.raises(CorewardError, match="needs paired views"):
        load_config(TrainConfig, config_path, ["rewards.0.params.view_loss=per_view", "grpo.loss_type=bnpo",
                                                      "rewards.0.params.rephrasings=null"])
