"""Co-rewarding-I: cross-view pseudo labels, the paired sampler, and a 2-process run."""

from __future__ import annotations

import pytest

from coreward.data.rows import paired_rows
from coreward.grpo.samplers import PairedRepeatSampler
from coreward.rewards.base import RolloutBatch
from coreward.rewards.co_rewarding_1 import CrossViewReward
from tests.helpers.grpo_probe import run_worker


def paired_batch(groups: list[tuple[str, int, list[str], str]], verifier) -> RolloutBatch:
    """groups: (pair_id, view, completions, reference) in batch order."""
    G = len(groups[0][2])
    rows = [(pair, view, c, ref) for pair, view, cs, ref in groups for c in cs]
    return RolloutBatch(
        prompts=[f"{pair}/{view}" for pair, view, _, _ in rows],
        completions=[c for _, _, c, _ in rows],
        completion_ids=[[1]] * len(rows),
        group_ids=[i // G for i in range(len(rows))],
        num_generations=G,
        columns={"pair_id": [p for p, _, _, _ in rows], "view": [v for _, v, _, _ in rows],
                 "answer": [r for _, _, _, r in rows]},
        context={"verifier": verifier},
    )


def test_labels_come_from_the_other_view(verifier):
    batch = paired_batch(
        [
            ("a", 0, ["\\boxed{4}", "\\boxed{5}", "\\boxed{5}"], "4"),  # own majority 5, partner's majority 4
            ("a", 1, ["\\boxed{4}", "\\boxed{4}", "\\boxed{9}"], "4"),  # own majority 4, partner's majority 5
            ("b", 1, ["\\boxed{7}", "", "\\boxed{7}"], "7"),  # partner (b, view 0) gave no answer: label empty
            ("b", 0, ["none", "", "?"], "7"),
        ],
        verifier,
    )
    rewards = CrossViewReward().compute(batch)
    assert rewards == [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    # view 0 groups (a0, b0) were rewarded on labels 4 (right) and 7 (right)
    assert batch.metrics["co_rewarding_1/label_accuracy_view0"] == 1.0
    # view 1 groups (a1, b1) on labels 5 (wrong) and none (wrong)
    assert batch.metrics["co_rewarding_1/label_accuracy_view1"] == 0.0
    assert batch.metrics["co_rewarding_1/view_agreement"] == 0.0


def test_verified_matching_accepts_equivalent_forms(verifier):
    batch = paired_batch(
        [("p", 0, ["\\boxed{0.5}", "\\boxed{0.5}"], "1/2"), ("p", 1, ["\\boxed{\\frac{1}{2}}", "\\boxed{2}"], "1/2")],
        verifier,
    )
    assert CrossViewReward(match="verified").compute(batch) == [1, 1, 1, 0]
    assert CrossViewReward(match="exact").compute(batch) == [0, 0, 0, 0]


def test_missing_view_is_an_error(verifier):
    batch = paired_batch([("p", 0, ["\\boxed{1}", "\\boxed{1}"], "1"), ("q", 1, ["\\boxed{1}", "\\boxed{1}"], "1")], verifier)
    with pytest.raises(RuntimeError, match="not in this generation batch"):
        CrossViewReward().compute(batch)


def test_sampler_keeps_pairs_side_by_side():
    sampler = PairedRepeatSampler(num_rows=20, mini_repeat_count=3, batch_size=4, repeat_count=2, seed=1)
    order = list(sampler)
    assert len(order) == len(sampler) == 10 * 2 * 3 * 2
    block = 4 * 3  # one generation batch: 4 prompts × G
    for start in range(0, len(order), block):
        rows = order[start : start + block]
        for k in range(0, block, 6):  # [q]*G + [q']*G
            q, q2 = rows[k : k + 3], rows[k + 3 : k + 6]
            assert len(set(q)) == 1 and len(set(q2)) == 1
            assert q[0] % 2 == 0 and q2[0] == q[0] + 1
    assert sorted(set(order)) == list(range(20))
    assert list(PairedRepeatSampler(20, 3, 4, 2, seed=1)) == order  # seeded: repeatable


def test_paired_rows_share_id_and_answer():
    rows = paired_rows([({"id": "x", "question": "q", "answer": "3"}, "q prime")])
    assert [(r["pair_id"], r["view"], r["question"], r["answer"]) for r in rows] == [("x", 0, "q", "3"), ("x", 1, "q prime", "3")]


def test_two_processes_keep_pairs_together(tiny_policy, tmp_path, verifier):
    # G=4 and 4 rows per process: one pair per step, its question on process 0 and its rephrasing on process 1
    results = run_worker(tiny_policy, tmp_path, nproc=2, per_device=4, steps=2, reward="co_rewarding_1")
    for step in range(2):
        calls = [r["calls"]["co_rewarding_1"][step] for r in results]
        assert calls[0]["rewards"] == calls[1]["rewards"]
        call = calls[0]
        G = 4
        groups = range(0, len(call["ids"]), G)
        keys = [(call["columns"]["pair_id"][s], call["columns"]["view"][s]) for s in groups]
        assert sorted(keys) == sorted({(p, v) for p, _ in keys for v in (0, 1)})  # both views of every pair
        batch = RolloutBatch(
            prompts=call["prompts"], completions=call["completions"], completion_ids=call["completion_ids"],
            group_ids=call["group_ids"], num_generations=G, columns=call["columns"], context={"verifier": verifier},
        )
        assert call["rewards"] == CrossViewReward().compute(batch)
