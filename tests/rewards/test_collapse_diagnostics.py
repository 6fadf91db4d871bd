"""The per-step diagnostics of an RM-based reward (rewards/rollout_diagnostics.py, rm/evaluate.py's
`rollout_score_diagnostics`): what the RM pays the rule-accepted and rule-rejected rollouts and the wrong answer a
group repeats most, and Cooper's pairs by kind. First on hand-made inputs whose answers are worked out by hand, then
logged by Cooper's and the static RM's `compute` on real rollouts of the tiny memorized policy (the fixture of
tests/rewards/cooper/test_cooper_variants.py) scored by the tiny random RM, against the rewards that `compute`
returned.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from coreward.rewards.cooper import CooperReward
from coreward.rewards.model import ModelReward
from coreward.rm.evaluate import rollout_pair_accuracy, rollout_score_diagnostics, score_unique
from tests.rewards.cooper import test_cooper_variants as variants


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
G = variants.G
rollouts = variants.rollouts  # G sampled completions for each of four memorized demo problems (module-scoped)
NAN = float("nan")


def test_scores_by_verdict_and_the_dominant_wrong_answer_by_hand():
    correct = [True, False, False, False,  # group 0: "7" is the wrong answer given twice
               False, False, False, False,  # group 1: "3" and "4" once each (the first met wins), two without answer
               True, True, True, True]  # group 2: nothing wrong
    answers = ["5", "7", "7", "8",
               "3", "4", None, None,
               "9", "9", "9", "9"]
    scores = [0.9, 0.6, 0.8, 0.1,
              0.2, 0.4, 0.5, NAN,
              0.7, NAN, 0.5, 0.3]
    got = rollout_score_diagnostics(correct, answers, scores, G=4)
    assert got["rm/accepted_score"] == pytest.approx((0.9 + 0.7 + 0.5 + 0.3) / 4)  # the NaN left out
    assert got["rm/rejected_score"] == pytest.approx((0.6 + 0.8 + 0.1 + 0.2 + 0.4 + 0.5) / 6)
    assert got["rm/dominant_wrong_score"] == pytest.approx((0.6 + 0.8 + 0.2) / 3)  # "7", "7" and "3"
    assert got["rm/dominant_wrong_share"] == pytest.approx(3 / 12)


def test_a_dominant_answer_scored_nan_counts_in_the_share_only_and_nothing_measured_is_none():
    got = rollout_score_diagnostics([False, False, True, True], ["1", "1", "2", "2"], [NAN, NAN, 0.4, 0.6], G=2)
    assert got == {"rm/accepted_score": pytest.approx(0.5), "rm/rejected_score": None,
                   "rm/dominant_wrong_score": None, "rm/dominant_wrong_share": 1 / 2}
    assert set(rollout_score_diagnostics([], [], [], G=2).values()) == {None}


def expected(batch, rewards: list[float]) -> dict[str, float]:
    """The diagnostics recomputed here from the rewards `compute` returned (σ of the RM) and the verdicts."""
    verdicts = batch.verdicts()
    accepted = [r for v, r in zip(verdicts, rewards) if v.correct]
    rejected = [r for v, r in zip(verdicts, rewards) if not v.correct]
    dominant, carriers = [], 0
    for rows in batch.groups():
        wrong = Counter(verdicts[i].extracted for i in rows if not verdicts[i].correct and verdicts[i].extracted)
        if wrong:
            answer = max(wrong, key=wrong.get)  # the first of the most common
            carriers += wrong[answer]
            dominant += [rewards[i] for i in rows if not verdicts[i].correct and verdicts[i].extracted == answer]
    return {"rm/accepted_score": sum(accepted) / len(accepted), "rm/rejected_score": sum(rejected) / len(rejected),
            "rm/dominant_wrong_score": sum(dominant) / len(dominant), "rm/dominant_wrong_share": carriers / len(batch),
            "rm/rollout_pair_accuracy": rollout_pair_accuracy([v.correct for v in verdicts], rewards, G)}


@pytest.mark.parametrize("negative", ["assistant", "mixed"])
def test_cooper_logs_what_its_rm_paid_the_rollouts_and_its_pairs_by_kind(rollouts, tiny_rm_path, verifier, negative):
    batch = variants.batch_of(rollouts, verifier)
    before = score_unique(CooperReward(rm=str(tiny_rm_path), device="cpu").get_learner().rm, list(zip(*rollouts)))
    rewards = CooperReward(rm=str(tiny_rm_path), negative=negative, device="cpu").compute(batch)
    assert rewards == pytest.approx(before)  # logging only: the rewards are the RM's scores before its update
    assert all(math.isfinite(r) for r in rewards)
    for name, value in expected(batch, rewards).items():
        assert batch.metrics[name] == pytest.approx(value), name
    assert 0 < batch.metrics["rm/dominant_wrong_share"] < 1  # the sampled groups repeat some wrong answers

    correct = [v.correct for v in batch.verdicts()]
    groups = [correct[rows.start:rows.stop] for rows in batch.groups()]
    with_positive = sum(any(g) for g in groups)
    mixed_groups = sum(any(g) and not all(g) for g in groups)
    assert 0 < mixed_groups
    # the perturb assistant writes a negative for every positive; a rollout negative needs a rejected rollout
    assert batch.metrics["rm/pairs_assistant"] == with_positive
    assert batch.metrics["rm/pairs_rollout"] == (mixed_groups if negative == "mixed" else 0)
    assert batch.metrics["rm/valid_pair_rate"] * len(groups) == pytest.approx(
        batch.metrics["rm/pairs_assistant"] + batch.metrics["rm/pairs_rollout"])
    assert 0 <= batch.metrics["rm/train_pair_accuracy"] <= 1  # the learner's, on the pairs it learned this step


def test_the_static_rm_logs_what_it_paid_the_rollouts_in_training_only(rollouts, tiny_rm_path, verifier):
    source = ModelReward(path=str(tiny_rm_path), device="cpu")
    batch = variants.batch_of(rollouts, verifier)
    rewards = source.compute(batch)
    for name, value in expected(batch, rewards).items():
        assert batch.metrics[name] == pytest.approx(value), name

    evaluation = variants.batch_of(rollouts, verifier)
    evaluation.context["mode"] = "eval"
    assert source.compute(evaluation) == rewards
    assert not any(name in evaluation.metrics for name in expected(batch, rewards))
