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


def test_a_group_without_its_other_view_gets_no_reward_and_is_counted(verifier, caplog):
    """Both views of every pair belong in one batch (the paired sampler's invariant); a group whose other view is
    missing has no label: its rollouts get no reward (None, "not applicable"), the rest are scored as usual, and the
    step counts it (its health watch warns)."""
    batch = paired_batch([("p", 0, ["\\boxed{1}", "\\boxed{2}"], "1"), ("q", 1, ["\\boxed{1}", "\\boxed{1}"], "1"),
                          ("p", 1, ["\\boxed{1}", "\\boxed{1}"], "1")], verifier)
    batch.step = 4  # steps done before this one: metrics.jsonl logs it as step 5, and so must the warning
    with caplog.at_level("WARNING", logger="coreward.rewards.co_rewarding_1"):
        assert CrossViewReward().compute(batch) == [1, 0, None, None, 1, 1]
    assert batch.metrics["co_rewarding_1/unpaired_groups"] == 1.0
    assert "co_rewarding_1: step 5: 1 of 3 prompt groups have no other view" in caplog.text
    paired = paired_batch([("p", 0, ["\\boxed{1}", "\\boxed{2}"], "1"), ("p", 1, ["\\boxed{1}", "\\boxed{1}"], "1")],
                          verifier)
    CrossViewReward().compute(paired)
    assert paired.metrics["co_rewarding_1/unpaired_groups"] == 0.0


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


@pytest.fixture(scope="module")
def answering_policy(tmp_path_factory):
    """Ends any demo question or rephrasing with "#### 1" or "#### 2" (2 in 5 each) or " How many?" (no answer,
    1 in 5): majorities, ties and empty answers come up in every run, and rewards vary within groups."""
    from tests.helpers.tiny_models import build_answering_policy

    return build_answering_policy(tmp_path_factory.mktemp("answering_policy"),
                                  endings=("#### 1", "#### 2", "#### 1", "#### 2", " How many?"))


def cross_view_rewards_by_hand(answers: list[str | None], pair_ids: list, views: list, G: int) -> list[float]:
    """Co-rewarding-I from its definition, independently of the package: a group's pseudo label is the majority
    answer of the other view's group of the same pair (empty answers don't vote; ties: the first seen); a rollout
    gets 1 when its answer is exactly that label and the label is not empty."""
    def majority(rows: range) -> str | None:
        votes = [answers[i] for i in rows if answers[i] is not None and answers[i].strip()]
        counts = {answer: votes.count(answer) for answer in votes}
        return next((answer for answer in votes if counts[answer] == max(counts.values())), None)

    groups = [range(start, start + G) for start in range(0, len(answers), G)]
    label = {(str(pair_ids[rows.start]), int(views[rows.start])): majority(rows) for rows in groups}
    rewards = []
    for rows in groups:
        other = label[str(pair_ids[rows.start]), 1 - int(views[rows.start])]
        rewards += [1.0 if other is not None and answers[i] == other else 0.0 for i in rows]
    return rewards


def group_advantages(rewards: list[float], G: int) -> list[float]:
    """TRL's group normalization, written out: (r - mean_g) / (std_g + 1e-4), Bessel-corrected std."""
    out = []
    for start in range(0, len(rewards), G):
        group = rewards[start : start + G]
        mean = sum(group) / G
        std = (sum((r - mean) ** 2 for r in group) / (G - 1)) ** 0.5
        out += [(r - mean) / (std + 1e-4) for r in group]
    return out


def test_two_processes_keep_pairs_together(answering_policy, tmp_path):
    """G=4 and 4 rows per process: one pair per step, its question on process 0 and its rephrasing on process 1.
    Both processes score the whole pair, with the rewards the method's definition gives, and each trains on its
    own slice of them."""
    from coreward.verify import extract_answer

    G, steps = 4, 2
    results = run_worker(answering_policy, tmp_path, nproc=2, per_device=4, steps=steps, reward="co_rewarding_1")
    all_rewards = []
    for step in range(steps):
        calls = [r["calls"]["co_rewarding_1"][step] for r in results]
        assert calls[0]["completions"] == calls[1]["completions"] and calls[0]["columns"] == calls[1]["columns"]
        call = calls[0]
        keys = [(call["columns"]["pair_id"][s], call["columns"]["view"][s]) for s in range(0, len(call["ids"]), G)]
        assert sorted(keys) == sorted({(p, v) for p, _ in keys for v in (0, 1)})  # both views of every pair
        assert len(keys) == 2 and keys[0][1] != keys[1][1]  # one view on each process
        answers = [extract_answer(c) for c in call["completions"]]
        expected = cross_view_rewards_by_hand(answers, call["columns"]["pair_id"], call["columns"]["view"], G)
        assert calls[0]["rewards"] == calls[1]["rewards"] == expected, (answers, calls[0]["rewards"])
        # each process's advantages: its own slice of the group normalization of those rewards
        got = [a for r in results for a in r["advantages"][step]]
        assert got == pytest.approx(group_advantages(expected, G), abs=1e-5)
        all_rewards += expected
    assert 0 < sum(all_rewards) < len(all_rewards)  # the rewards did vary: the comparisons above say something
