"""The statistics module against values worked out by hand or by an independent scipy route."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from coreward.evaluation import stats


def test_t_quantile_is_exact_beyond_small_df():
    # a table with a 1.96 fallback gave every df above 10 the normal quantile
    assert stats.t_quantile(30) == pytest.approx(2.0423, abs=1e-4)
    assert stats.t_quantile(15) == pytest.approx(2.1314, abs=1e-4)
    assert stats.t_quantile(5) == pytest.approx(2.5706, abs=1e-4)
    with pytest.raises(ValueError):
        stats.t_quantile(0)


def test_t_interval_matches_scipy_and_a_single_value_has_none():
    values = [0.31, 0.52, 0.44, 0.61, 0.39, 0.47]
    mean, low, high = stats.t_interval(values)
    expected = scipy_stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=scipy_stats.sem(values))
    assert (low, high) == pytest.approx(expected)
    assert mean == pytest.approx(np.mean(values))
    mean, low, high = stats.t_interval([0.5])
    assert mean == 0.5 and math.isnan(low) and math.isnan(high)


def test_sign_flip_by_hand():
    # sign patterns of (1, 2, 3): |sums| 6, 0, 2, 4, 4, 2, 0, 6: two of eight reach 6
    assert stats.sign_flip_p([1, 2, 3]) == pytest.approx(0.25)
    assert stats.sign_flip_p([1, -1]) == pytest.approx(1.0)
    # six seeds all the same sign: the smallest p six seeds can give
    assert stats.sign_flip_p([0.1, 0.2, 0.05, 0.3, 0.15, 0.12]) == pytest.approx(2 / 64)


def test_sign_flip_monte_carlo_agrees_with_enumeration():
    rng = np.random.default_rng(3)
    diffs = list(rng.normal(0.3, 1.0, size=14))
    exact = stats.sign_flip_p(diffs)
    sampled = stats.sign_flip_p(diffs, exact_up_to=8, samples=100_000, seed=1)
    assert sampled == pytest.approx(exact, abs=0.01)


def test_paired_difference_and_its_sign():
    a = [0.80, 0.75, 0.90, 0.85]
    b = [0.60, 0.70, 0.65, 0.66]
    comparison = stats.paired(a, b)
    assert comparison.n == 4 and comparison.mean == pytest.approx(np.mean(np.subtract(a, b)))
    assert comparison.resolved and comparison.low > 0
    assert comparison.p == pytest.approx(2 / 16)
    assert not stats.paired(b, a).low > 0
    with pytest.raises(ValueError, match="pairs must match"):
        stats.paired([1.0, 2.0], [1.0])


def test_equivalence_is_two_one_sided_tests():
    rng = np.random.default_rng(0)
    close = rng.normal(0.0, 0.5, size=40)
    result = stats.equivalence(close, margin=0.5)
    # the same two one-sided tests through scipy's one-sample t test on shifted data
    p_low = scipy_stats.ttest_1samp(close + 0.5, 0.0, alternative="greater").pvalue
    p_high = scipy_stats.ttest_1samp(close - 0.5, 0.0, alternative="less").pvalue
    assert result.p == pytest.approx(max(p_low, p_high))
    assert result.equivalent and -0.5 < result.low < result.high < 0.5
    # no difference found is not equality: a wide spread fails to show equivalence at the same margin
    noisy = rng.normal(0.0, 5.0, size=6)
    assert not stats.equivalence(noisy, margin=0.5).equivalent
    # a real difference beyond the margin is never called equivalent
    assert not stats.equivalence(rng.normal(2.0, 0.2, size=30), margin=0.5).equivalent
    with pytest.raises(ValueError):
        stats.equivalence([0.1, 0.2], margin=0)


def test_counts_test_is_fishers_exact():
    # 0 of 12 against 2 of 12 collapsed: far from resolved
    assert stats.counts_test(0, 12, 2, 12) == pytest.approx(0.4783, abs=1e-4)
    assert stats.counts_test(0, 16, 12, 16) < 0.001
    with pytest.raises(ValueError):
        stats.counts_test(3, 2, 0, 2)


def test_holm_step_down():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    # never below the raw p, and monotone in the raw order
    raw = [0.001, 0.2, 0.03, 0.04, 0.5]
    adjusted = stats.holm(raw)
    assert all(a >= r for a, r in zip(adjusted, raw))
    for (ra, aa), (rb, ab) in itertools.combinations(zip(raw, adjusted), 2):
        assert (ra <= rb) == (aa <= ab) or aa == ab


def test_standard_error_of_an_evaluation():
    # 112 problems × 4 samples near 50%: about 2.4 points from sampling alone
    assert 100 * stats.standard_error_of_accuracy(0.5, 112, 4) == pytest.approx(2.36, abs=0.01)
