"""The RM's pair accuracy on the policy's current rollouts."""

import math
import random

import pytest

from coreward.rm.evaluate import rollout_pair_accuracy


def brute_force(correct, scores, G):
    wins = total = 0.0
    for g in range(0, len(correct), G):
        rows = [(c, s) for c, s in zip(correct[g:g + G], scores[g:g + G]) if math.isfinite(s)]
        for c_pos, s_pos in rows:
            for c_neg, s_neg in rows:
                if c_pos and not c_neg:
                    wins, total = wins + (s_pos > s_neg) + 0.5 * (s_pos == s_neg), total + 1
    return wins / total if total else None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rollout_pair_accuracy_compares_only_within_a_group(seed):
    rng = random.Random(seed)
    G = 4
    correct = [rng.random() < 0.5 for _ in range(24)]
    scores = [rng.choice([0.1, 0.5, 0.9, float("nan")]) for _ in range(24)]
    assert rollout_pair_accuracy(correct, scores, G) == pytest.approx(brute_force(correct, scores, G))


def test_rollout_pair_accuracy_extremes():
    correct = [True, False, True, False]
    assert rollout_pair_accuracy(correct, [0.9, 0.1, 0.8, 0.2], 2) == 1.0
    assert rollout_pair_accuracy(correct, [0.1, 0.9, 0.2, 0.8], 2) == 0.0
    # a group's positive is never compared with another group's negative
    assert rollout_pair_accuracy([True, True, False, False], [0.1, 0.1, 0.9, 0.9], 2) is None
