"""The statistics every claim of coreward is judged by, in one place, on scipy.

- `t_interval`: mean and Student-t interval with the exact quantile (n − 1 degrees of freedom).
- `sign_flip_p`: the paired exact permutation test: under "no difference" each pair's difference is as likely
  negated, so p = the share of the 2^n sign patterns whose |mean| is at least the observed one (exact up to
  `exact_up_to` pairs, a seeded Monte Carlo estimate above).
- `paired`: both of the above on paired differences, as one `Comparison`.
- `equivalence`: two one-sided t tests (TOST) against a stated margin: "equal" means both one-sided tests
  reject, i.e. the 1 − 2α interval lies inside [−margin, +margin]. A test that fails to find a difference
  never shows equality.
- `counts_test`: Fisher's exact test of two counts out of their totals (e.g. collapsed runs per arm).
- `holm`: Holm's step-down correction of a family of p values.

Differences are "a − b" throughout: a positive mean says the first arm is higher.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as _scipy


def t_quantile(df: int, confidence: float = 0.95) -> float:
    """The two-sided quantile of Student's t for `confidence` (0.975 for 95%), exact for every df."""
    if df < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, got {df}")
    return float(_scipy.t.ppf(0.5 + confidence / 2, df))


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval of the mean; a single value has no interval (nan, nan)."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("t_interval of no values")
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(len(values) - 1, confidence) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def sign_flip_p(differences: Sequence[float], exact_up_to: int = 20, samples: int = 200_000, seed: int = 0) -> float:
    """Two-sided paired permutation p of the mean difference (exact enumeration up to `exact_up_to` pairs)."""
    diffs = np.asarray(differences, dtype=float)
    if diffs.size == 0:
        raise ValueError("sign_flip_p of no differences")
    observed = abs(diffs.sum()) - 1e-12 * max(1.0, float(np.abs(diffs).sum()))  # ties count as at least as extreme
    if diffs.size <= exact_up_to:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=diffs.size)))
        return float(np.mean(np.abs(signs @ diffs) >= observed))
    rng = np.random.default_rng(seed)
    extreme, chunk = 0, max(1, 2_000_000 // diffs.size)  # chunks of about 16 MB of signs, whatever the pairs
    for start in range(0, samples, chunk):
        signs = rng.choice((1.0, -1.0), size=(min(chunk, samples - start), diffs.size))
        extreme += int(np.sum(np.abs(signs @ diffs) >= observed))
    # (k + 1) / (N + 1): a Monte Carlo p is never 0 (the observed pattern is one of the patterns)
    return float((extreme + 1) / (samples + 1))


@dataclass(frozen=True)
class Comparison:
    """A paired comparison a − b: n pairs, the mean difference with its t interval and the exact sign-flip p."""

    n: int
    mean: float
    low: float
    high: float
    p: float
    confidence: float = 0.95

    @property
    def resolved(self) -> bool:
        """The interval excludes 0 (the sign of the difference is known at this confidence)."""
        return self.n >= 2 and (self.low > 0 or self.high < 0)

    def format(self, digits: int = 1, scale: float = 1.0) -> str:
        if self.n < 2:
            return f"{self.mean * scale:+.{digits}f} (n 1, no interval)"
        return (f"{self.mean * scale:+.{digits}f} [{self.low * scale:+.{digits}f}, {self.high * scale:+.{digits}f}], "
                f"n {self.n}, p {self.p:.3g}")


def paired(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Comparison:
    """a − b over pairs (the same seed or problem in both arms)."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison of {len(a)} against {len(b)} values: pairs must match")
    diffs = [float(x) - float(y) for x, y in zip(a, b)]
    mean, low, high = t_interval(diffs, confidence)
    return Comparison(len(diffs), mean, low, high, sign_flip_p(diffs), confidence)


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests of |mean difference| < margin: `equivalent` when p (the larger one-sided p) < alpha."""

    n: int
    mean: float
    margin: float
    low: float  # the 1 − 2·alpha interval: equivalence is this interval inside (−margin, +margin)
    high: float
    p: float
    alpha: float = 0.05

    @property
    def equivalent(self) -> bool:
        return self.p < self.alpha

    def format(self, digits: int = 1, scale: float = 1.0) -> str:
        verdict = "equivalent" if self.equivalent else "not shown equivalent"
        return (f"{self.mean * scale:+.{digits}f} [{self.low * scale:+.{digits}f}, {self.high * scale:+.{digits}f}] "
                f"within ±{self.margin * scale:.{digits}f}: {verdict} (TOST p {self.p:.3g}, n {self.n})")


def equivalence(differences: Sequence[float], margin: float, alpha: float = 0.05) -> Equivalence:
    """TOST on paired differences (or on one sample of differences) against ±margin, Student-t."""
    if margin <= 0:
        raise ValueError(f"an equivalence margin must be positive, got {margin}")
    diffs = np.asarray(differences, dtype=float)
    n = diffs.size
    if n < 2:
        raise ValueError(f"an equivalence test needs at least 2 differences, got {n}")
    mean = float(diffs.mean())
    se = float(diffs.std(ddof=1)) / math.sqrt(n)
    df = n - 1
    if se == 0:
        p = 0.0 if abs(mean) < margin else 1.0
        return Equivalence(n, mean, margin, mean, mean, p, alpha)
    p_lower = float(_scipy.t.sf((mean + margin) / se, df))  # H0: mean <= -margin
    p_upper = float(_scipy.t.cdf((mean - margin) / se, df))  # H0: mean >= +margin
    half = float(_scipy.t.ppf(1 - alpha, df)) * se
    return Equivalence(n, mean, margin, mean - half, mean + half, max(p_lower, p_upper), alpha)


def counts_test(events_a: int, total_a: int, events_b: int, total_b: int) -> float:
    """Fisher's exact two-sided p that two event counts (e.g. collapses out of runs) share one rate."""
    for events, total in ((events_a, total_a), (events_b, total_b)):
        if not 0 <= events <= total:
            raise ValueError(f"{events} events out of {total}: need 0 <= events <= total")
    table = [[events_a, total_a - events_a], [events_b, total_b - events_b]]
    return float(_scipy.fisher_exact(table, alternative="two-sided").pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the order given (reject where adjusted p < alpha)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def standard_error_of_accuracy(accuracy: float, problems: int, samples: int) -> float:
    """Sampling standard error of avg@n on a fixed set of problems: sqrt(p(1 − p) / (problems · samples)). When the
    problems differ in difficulty the true sampling error is smaller (Jensen), so this is the bound to plan n by."""
    if problems < 1 or samples < 1:
        raise ValueError("need at least one problem and one sample")
    return math.sqrt(accuracy * (1 - accuracy) / (problems * samples))
