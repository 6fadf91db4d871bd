"""Behaviour of the reward sources: each reward moves in its documented direction when its inputs change in a
known way, and each test fails if the method silently becomes another one (majority of the own group vs of the
other view, a reward read from the wrong statistic, a reward that ignores the reference).

Co-rewarding-II's teacher: tests/rewards/test_teacher_behaviour.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from coreward.rewards.base import RolloutBatch
from coreward.rewards.co_rewarding_1 import CrossViewReward
from coreward.rewards.entropy import EntropyReward
from coreward.rewards.majority import MajorityVoteReward
from coreward.rewards.rule import RuleReward
from coreward.rewards.self_certainty import SelfCertaintyReward
from tests.helpers.batches import batch_of


def boxed(*answers: str) -> list[str]:
    return [f"so \\boxed{{{a}}}" if a else "no idea" for a in answers]


# ---------------------------------------------------------------------------------- rule
def test_rule_rewards_a_correct_answer_and_only_against_the_reference(verifier):
    group = boxed("7", "8", "", "7.0")
    assert RuleReward().compute(batch_of([group], verifier, answers=["7"])) == [1.0, 0.0, 0.0, 1.0]
    # the same completions against another reference: the reward follows the reference, not the completions' vote
    assert RuleReward().compute(batch_of([group], verifier, answers=["8"])) == [0.0, 1.0, 0.0, 0.0]
    # a wrong answer made right gains the reward; nothing else moves
    assert RuleReward().compute(batch_of([boxed("7", "7", "", "7.0")], verifier, answers=["7"])) == [1.0, 1.0, 0.0, 1.0]


# ---------------------------------------------------------------------------------- majority
@pytest.mark.parametrize("match", ["verified", "exact"])
def test_majority_rewards_agreement_with_the_own_group_and_more_agreement_scores_more(verifier, match):
    source = MajorityVoteReward(match=match)
    split = boxed("3", "3", "5", "9")
    rewards = source.compute(batch_of([split], verifier))
    assert rewards == [1.0, 1.0, 0.0, 0.0]
    more = source.compute(batch_of([boxed("3", "3", "3", "9")], verifier))  # one more rollout agrees
    assert more == [1.0, 1.0, 1.0, 0.0] and sum(more) > sum(rewards)
    # the label is the group's own: the group's rewards don't depend on another group or on the reference
    other_a = source.compute(batch_of([split, boxed("5", "5", "5", "5")], verifier, answers=["5", "5"]))
    other_b = source.compute(batch_of([split, boxed("9", "9", "1", "2")], verifier, answers=["9", "1"]))
    assert other_a[:4] == other_b[:4] == rewards
    assert source.compute(batch_of([boxed("", "", "", "")], verifier)) == [0.0] * 4  # no answer, no label


# ---------------------------------------------------------------------------------- Co-rewarding-I
def two_views(q: list[str], q_rephrased: list[str], verifier) -> RolloutBatch:
    """One problem, its two views side by side as the paired sampler emits them: [q]×G + [q']×G."""
    G = len(q)
    return RolloutBatch(
        prompts=["q"] * G + ["q'"] * G, completions=q + q_rephrased, completion_ids=[[1]] * (2 * G),
        group_ids=[0] * G + [1] * G, num_generations=G,
        columns={"pair_id": ["p0"] * (2 * G), "view": [0] * G + [1] * G, "answer": ["3"] * (2 * G)},
        context={"verifier": verifier},
    )


def test_co_rewarding_1_labels_each_view_with_the_other_views_majority(verifier):
    source = CrossViewReward(match="verified")
    q = boxed("3", "3", "3", "5")  # q's own majority: 3
    q_rephrased = boxed("5", "5", "3", "9")  # q''s own majority: 5
    rewards = source.compute(two_views(q, q_rephrased, verifier))
    # q's rollouts are rewarded for agreeing with q''s majority (5), q''s with q's (3): not their own majorities
    assert rewards[:4] == [0.0, 0.0, 0.0, 1.0]
    assert rewards[4:] == [0.0, 0.0, 1.0, 0.0]

    # change only q''s rollouts (its majority becomes 3): q's rewards change, q''s label (q's majority, 3) does not
    changed = boxed("3", "3", "9", "9")
    rewards2 = source.compute(two_views(q, changed, verifier))
    assert rewards2[:4] == [1.0, 1.0, 1.0, 0.0] != rewards[:4]
    assert rewards2[4:] == [1.0, 1.0, 0.0, 0.0]  # q''s new rollouts scored against the same label 3

    # and the other way round: change only q's rollouts, q''s rewards follow, q's label (q''s majority, 5) stays
    rewards3 = source.compute(two_views(boxed("5", "9", "9", "9"), q_rephrased, verifier))
    assert rewards3[:4] == [1.0, 0.0, 0.0, 0.0]
    assert rewards3[4:] == [0.0, 0.0, 0.0, 1.0] != rewards[4:]


# ---------------------------------------------------------------------------------- self-certainty, entropy
def token_stats_at(sharpness: float, tiny_policy) -> dict[str, list[float]]:
    """The policy's completion-token statistics with its logits multiplied by `sharpness` (the final norm's
    weight scaled): the same ranking of tokens, a sharper (>1) or flatter (<1) distribution."""
    from transformers import AutoModelForCausalLM

    from coreward.grpo.token_stats import completion_token_stats

    model = AutoModelForCausalLM.from_pretrained(tiny_policy).eval()
    with torch.no_grad():
        model.model.norm.weight.mul_(sharpness)
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    completions = [[3, 4, 5, 6], [7, 8], [9, 10, 11]]
    return completion_token_stats(model, prompts, completions, pad_token_id=0)


def scored(source, stats: dict[str, list[float]], verifier) -> list[float]:
    batch = batch_of([["a", "b", "c"]], verifier)
    batch.token_stats = stats
    return source.compute(batch)


def test_a_sharper_distribution_earns_more_self_certainty_and_more_entropy_reward(tiny_policy, verifier):
    flat, base, sharp = (token_stats_at(s, tiny_policy) for s in (0.0, 1.0, 4.0))
    from transformers import AutoConfig

    vocabulary = math.log(AutoConfig.from_pretrained(tiny_policy).vocab_size)
    for source in (SelfCertaintyReward(), EntropyReward()):
        r_flat, r_base, r_sharp = (scored(source, s, verifier) for s in (flat, base, sharp))
        assert all(a < b < c for a, b, c in zip(r_flat, r_base, r_sharp)), (type(source).__name__, r_flat, r_base, r_sharp)
    # the flat (uniform) distribution: self-certainty KL(U‖U) = 0, entropy reward −log|V| (the two are different
    # quantities: a source reading the other's statistic fails here)
    assert scored(SelfCertaintyReward(), flat, verifier) == pytest.approx([0.0] * 3, abs=1e-5)
    assert scored(EntropyReward(), flat, verifier) == pytest.approx([-vocabulary] * 3, rel=1e-3)
    assert all(r > 0 for r in scored(SelfCertaintyReward(), sharp, verifier))


# ---------------------------------------------------------------------------------- exact matching
def test_exact_matching_compares_the_answers_unstripped_as_the_authors_did(verifier):
    """The authors vote on and compare raw `\\boxed{}` contents (`ans == pseudo_label`): ` 3` is not `3`. Blank
    answers still never vote; verified matching sees one answer."""
    from coreward.rewards.co_rewarding_2 import CoRewarding2Reward

    policy = [["\\boxed{3}", "\\boxed{ 3}", "\\boxed{ }", "\\boxed{4}"]]
    teacher = [["\\boxed{ 3}", "\\boxed{ 3}", "\\boxed{3}", "\\boxed{ }"]]  # majority: " 3" (2 votes to 1)
    exact = CoRewarding2Reward(match="exact", extract="boxed_raw")
    assert exact.score(batch_of(policy, verifier), teacher) == [0.0, 1.0, 0.0, 0.0]
    verified = CoRewarding2Reward(match="verified", extract="boxed_raw")
    assert verified.score(batch_of(policy, verifier), teacher) == [1.0, 1.0, 0.0, 0.0]
    cross = CrossViewReward(match="exact", extract="boxed_raw")
    assert cross.compute(two_views(policy[0], teacher[0], verifier))[:4] == [0.0, 1.0, 0.0, 0.0]
