"""Majority voting, self-certainty and entropy: hand-built groups, direct torch computations, 2 processes."""

from __future__ import annotations

import math

import pytest
import torch

from coreward.grpo.token_stats import completion_token_stats
from coreward.rewards.base import RolloutBatch
from coreward.rewards.entropy import EntropyReward
from coreward.rewards.majority import MajorityVoteReward
from coreward.rewards.self_certainty import SelfCertaintyReward
from tests.helpers.batches import batch_of
from tests.helpers.grpo_probe import run_worker


def test_majority_verified_groups_equivalent_forms(verifier):
    groups = [
        ["\\boxed{1/2}", "#### 0.5", "\\boxed{3}", "The answer is \\frac{1}{2}."],  # 1/2 ≡ 0.5 ≡ \frac12: 3 votes
        ["\\boxed{7}", "no answer here", "", "\\boxed{7}"],  # empty answers don't vote and get 0
        ["no idea", "still nothing", "", "?"],  # nobody answered (prose and punctuation are no answers): no label, all 0
    ]
    batch = batch_of(groups, verifier, answers=["0.5", "8", "1"])
    rewards = MajorityVoteReward().compute(batch)
    assert rewards == [1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    # labels: 1/2 (true), 7 (false: gold 8), none -> 1 of 2 labelled groups right... over 3 groups
    assert batch.metrics["majority/label_accuracy"] == pytest.approx(1 / 3)
    assert batch.metrics["majority/no_label_rate"] == pytest.approx(1 / 3)


def test_majority_exact_strings_as_the_authors(verifier):
    groups = [["\\boxed{1/2}", "#### 0.5", "\\boxed{0.5}", "\\boxed{1/2}"]]
    # exact: "1/2" and "0.5" both have 2 votes -> tie -> first seen ("1/2") wins
    assert MajorityVoteReward(match="exact").compute(batch_of(groups, verifier)) == [1, 0, 0, 1]
    # verified: all four are one answer
    assert MajorityVoteReward(match="verified").compute(batch_of(groups, verifier)) == [1, 1, 1, 1]


def test_majority_tie_goes_to_first_seen(verifier):
    groups = [["\\boxed{5}", "\\boxed{6}", "\\boxed{6}", "\\boxed{5}"], ["\\boxed{6}", "\\boxed{5}", "\\boxed{5}", "\\boxed{6}"]]
    assert MajorityVoteReward().compute(batch_of(groups, verifier)) == [1, 0, 0, 1, 1, 0, 0, 1]


def test_majority_needs_no_reference(verifier):
    batch = batch_of([["\\boxed{2}", "\\boxed{2}", "\\boxed{3}", ""]], verifier)
    assert batch.references is None
    assert MajorityVoteReward().compute(batch) == [1, 1, 0, 0]
    assert "majority/label_accuracy" not in batch.metrics


def direct_stats(model, prompt: list[int], completion: list[int]) -> tuple[float, float]:
    """Entropy and self-certainty of one unpadded sequence, written from the definitions."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].double()
    entropies, certainties = [], []
    for t in range(len(completion)):
        p = torch.softmax(logits[len(prompt) - 1 + t], dim=-1)
        V = p.numel()
        entropies.append(float(-(p * p.log()).sum()))
        certainties.append(float(sum(-math.log(V) - math.log(float(pj)) for pj in p) / V))
    return sum(entropies) / len(entropies), sum(certainties) / len(certainties)


def test_token_stats_match_direct_computation(tiny_policy):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_policy).eval()
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    completions = [[14, 15, 16, 17], [18], [19, 20]]
    stats = completion_token_stats(model, prompts, completions, pad_token_id=0, batch_size=2)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        entropy, certainty = direct_stats(model, p, c)
        assert stats["entropy"][i] == pytest.approx(entropy, rel=1e-4)
        assert stats["self_certainty"][i] == pytest.approx(certainty, rel=1e-4)
    batch = RolloutBatch(prompts=[""] * 3, completions=[""] * 3, completion_ids=completions, group_ids=[0, 0, 0],
                         num_generations=3, columns={}, token_stats=stats)
    assert SelfCertaintyReward().compute(batch) == stats["self_certainty"]
    assert EntropyReward().compute(batch) == [-h for h in stats["entropy"]]
    assert all(c >= 0 for c in stats["self_certainty"])  # KL is non-negative


def test_two_processes_give_single_process_rewards(tiny_policy, tmp_path, verifier):
    """Rewards of a 2-process run's first step equal a one-process recomputation on the same global batch."""
    from transformers import AutoModelForCausalLM

    names = "majority,self_certainty,entropy"
    results = run_worker(tiny_policy, tmp_path, nproc=2, per_device=6, steps=1, reward=names)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy).eval()  # the weights of step 0
    for name in names.split(","):
        calls = [r["calls"][name][0] for r in results]
        assert calls[0]["rewards"] == calls[1]["rewards"]  # both processes computed the same global rewards
        call = calls[0]
        batch = RolloutBatch(
            prompts=call["prompts"], completions=call["completions"], completion_ids=call["completion_ids"],
            group_ids=call["group_ids"], num_generations=4, columns={"answer": call["answers"]},
            prompt_ids=call["prompt_ids"], context={"verifier": verifier},
        )
        if name == "majority":
            expected = MajorityVoteReward().compute(batch)
        else:
            batch.token_stats = completion_token_stats(model, call["prompt_ids"], call["completion_ids"], pad_token_id=0)
            expected = (SelfCertaintyReward() if name == "self_certainty" else EntropyReward()).compute(batch)
        assert call["rewards"] == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_majority_boxed_raw_votes_on_the_authors_strings(verifier):
    """extract="boxed_raw" with match="exact" (the Co-rewarding baseline): `####` answers don't vote, and
    `\\boxed{0.5}` and `\\boxed{1/2}` are different answers; the default reads and merges them all."""
    groups = [["\\boxed{1/2}", "#### 0.5", "#### 0.5", "\\boxed{0.5}", "\\boxed{1/2}", "#### 0.5"]]
    raw = MajorityVoteReward(match="exact", extract="boxed_raw").compute(batch_of(groups, verifier))
    assert raw == [1, 0, 0, 0, 1, 0]
    default = MajorityVoteReward().compute(batch_of(groups, verifier))
    assert default == [1, 1, 1, 1, 1, 1]
