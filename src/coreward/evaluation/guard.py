"""The overoptimization guard's rule: the step where verified accuracy turns down while the reward holds.

grpo/guard.py runs it during training (the alarm, guard.stop, best/) and says what it is for; `replay` runs it over
a finished run's metrics, so `coreward report` and `coreward map` mark where it fired, or would have.
On the EMA-smoothed curves (weight `smooth`, TensorBoard's debiased EMA):

    after `warmup` steps, with P = the running peak of verified accuracy v (reached at step p) and R = the reward there,
    drop  = P − v_t                          ≥ max(min_drop, rel_drop · P)   (verified accuracy has turned down)
    fall  = R − r_t                          ≤ gap_share · drop             (the reward fell far less: the gap opened)
    both for `patience` logged steps in a row; it fires once.

A reward that is the verifier (the rule reward: r = v) falls exactly as far as v, so `fall = drop` and the rule
never fires on it. A reward off the [0, 1] scale of an accuracy (self-certainty, entropy) is compared by its running
min-max range: `fall / (max − min)`. The verified signal is the training rollouts' `verified_accuracy` (data with
references), else the periodic held-out evaluation (`eval/avg@n`), unsmoothed, with a patience of at most 2.

The defaults (smooth 0.8, warm-up 10, a drop of 15% of the peak and at least 0.03, the reward falling by at most
half of that, 3 steps in a row) were chosen on the hackability map's cells at 4x the demo's learning rate
(benchmarks/guard_calibration.py; the counts in docs/overoptimization.md, "The overoptimization guard").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any


EVAL_PATTERN = re.compile(r"eval/avg@\d+")
EVAL_PATIENCE = 2


@dataclass
class GuardSettings:
    """The `guard:` section of a training config: the overoptimization guard (grpo/guard.py says what it does)."""

    enabled: bool = True  # watch the run (metric, warning, best/); false: none of it
    stop: bool = False  # stop the run at the alarm (its final/ is that step's model; best/ is kept beside it)
    # EMA weight of the per-step curves (`coreward report` draws them at 0.6: the guard smooths more, so that a
    # dip of a few steps that recovers is no alarm)
    smooth: float = 0.8
    warmup: int = 10  # no alarm, and no peak counted, before this step
    min_drop: float = 0.03  # verified accuracy must fall at least this far below its peak ...
    rel_drop: float = 0.15  # ... and at least this share of the peak
    gap_share: float = 0.5  # while the reward fell by at most this share of verified accuracy's fall
    patience: int = 3  # logged steps in a row with both, before the alarm
    keep_best: bool = True  # keep best/ (the policy at the best verified accuracy)
    best_min_gain: float = 0.01  # best/ is rewritten when the best verified accuracy rises by at least this

    def validate(self) -> list[str]:
        """Problems, each naming its key (empty when the settings are good)."""
        problems = []
        if not 0 <= self.smooth < 1:
            problems.append(f"guard.smooth must be in [0, 1), got {self.smooth}")
        for key in ("warmup", "patience"):
            if getattr(self, key) < 1:
                problems.append(f"guard.{key} must be >= 1, got {getattr(self, key)}")
        for key in ("min_drop", "rel_drop", "best_min_gain"):
            if not getattr(self, key) >= 0:
                problems.append(f"guard.{key} must be >= 0, got {getattr(self, key)}")
        if not 0 <= self.gap_share < 1:
            problems.append(f"guard.gap_share must be in [0, 1) (1 would let a reward that falls as far as the "
                            f"verified accuracy fire the alarm), got {self.gap_share}")
        return problems



@dataclass
class Reading:
    """What the detector made of one point."""

    step: int
    reward: float  # smoothed
    verified: float  # smoothed
    peak: float | None  # best verified accuracy since warm-up
    peak_step: int | None
    drop: float  # peak − verified (0 before the peak exists)
    fall: float  # reward at the peak − reward now, on the accuracy's scale
    opened: bool  # both conditions hold at this point
    alarm: bool  # the alarm fires at this point (once per run)
    new_best: bool  # a new peak of verified accuracy


class _EMA:
    """TensorBoard's debiased EMA, one value at a time (`evaluation.plots.ema` over a list)."""

    def __init__(self, weight: float):
        self.weight, self.last, self.count = weight, 0.0, 0

    def __call__(self, value: float) -> float:
        self.count += 1
        if self.weight == 0:
            return value
        self.last = self.weight * self.last + (1 - self.weight) * value
        return self.last / (1 - self.weight ** self.count)


class Detector:
    """The alarm rule of the module docstring, fed one (step, reward, verified) point at a time."""

    def __init__(self, settings: GuardSettings, sparse: bool = False):
        self.settings = settings
        smooth = 0.0 if sparse else settings.smooth  # evaluation points are not smoothed
        self.patience = min(settings.patience, EVAL_PATIENCE) if sparse else settings.patience
        self._reward, self._verified = _EMA(smooth), _EMA(smooth)
        self.peak: float | None = None
        self.peak_step: int | None = None
        self.reward_at_peak = 0.0
        self.low = self.high = None  # range of the smoothed reward (for a reward off the [0, 1] scale)
        self.streak = 0
        self.fired_at: int | None = None

    def observe(self, step: int, reward: float, verified: float) -> Reading:
        s = self.settings
        r, v = self._reward(reward), self._verified(verified)
        self.low = r if self.low is None else min(self.low, r)
        self.high = r if self.high is None else max(self.high, r)
        new_best = False
        if step >= s.warmup and (self.peak is None or v > self.peak):
            self.peak, self.peak_step, self.reward_at_peak, new_best = v, step, r, True
        drop = self.peak - v if self.peak is not None else 0.0
        fall = (self.reward_at_peak - r) / self.reward_scale() if self.peak is not None else 0.0
        opened = (self.peak is not None and drop >= max(s.min_drop, s.rel_drop * self.peak)
                  and fall <= s.gap_share * drop)
        self.streak = self.streak + 1 if opened else 0
        alarm = self.fired_at is None and self.streak >= self.patience
        if alarm:
            self.fired_at = step
        return Reading(step, r, v, self.peak, self.peak_step, drop, fall, opened, alarm, new_best)

    def reward_scale(self) -> float:
        """1 for a reward on an accuracy's [0, 1] scale; else the smoothed reward's range so far."""
        if -0.01 <= self.low and self.high <= 1.01:
            return 1.0
        return max(self.high - self.low, 1e-12)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def eval_key(row: dict[str, Any]) -> str | None:
    return next((k for k in row if EVAL_PATTERN.fullmatch(k) and _finite(row[k])), None)


class Watch:
    """Feeds a run's logged rows to the right detector: the training rollouts' verified accuracy when the run logs
    it, else its held-out evaluation (label-free data)."""

    def __init__(self, settings: GuardSettings):
        self.settings = settings
        self.dense, self.sparse = Detector(settings), Detector(settings, sparse=True)
        self.last_reward: float | None = None  # latest smoothed training reward (for evaluation points)
        self._reward = _EMA(settings.smooth)
        self.source: str | None = None  # "training rollouts" | "held-out evaluation"

    def train_row(self, step: int, row: dict[str, Any]) -> Reading | None:
        """A training step's metrics (reward, verified_accuracy); None when it carries no verified signal."""
        if _finite(row.get("reward")):
            self.last_reward = self._reward(float(row["reward"]))
        if self.source == "held-out evaluation" or not (_finite(row.get("reward"))
                                                        and _finite(row.get("verified_accuracy"))):
            return None
        self.source = "training rollouts"
        return self.dense.observe(step, float(row["reward"]), float(row["verified_accuracy"]))

    def eval_row(self, step: int, row: dict[str, Any]) -> Reading | None:
        """An evaluation's metrics (eval/avg@n): read only while the training rollouts have no verified signal."""
        key = eval_key(row)
        if key is None or self.source == "training rollouts" or self.last_reward is None:
            return None
        self.source = "held-out evaluation"
        return self.sparse.observe(step, self.last_reward, float(row[key]))

    @property
    def detector(self) -> Detector:
        return self.sparse if self.source == "held-out evaluation" else self.dense


def replay(rows: list[dict[str, Any]], settings: GuardSettings | None = None) -> tuple[Watch, list[Reading]]:
    """The guard run over a finished run's metrics rows (one row per step: training metrics, and evaluation
    metrics on evaluation steps, which the live guard reads before that step's training metrics)."""
    watch, readings = Watch(settings or GuardSettings()), []
    for row in rows:
        step = row.get("step")
        if not isinstance(step, int):
            continue
        for reading in (watch.eval_row(step, row), watch.train_row(step, row)):
            if reading is not None:
                readings.append(reading)
    return watch, readings


def alarm_step(rows: list[dict[str, Any]], settings: GuardSettings | None = None) -> int | None:
    """The step at which the guard fires on these metrics rows (None: never)."""
    return replay(rows, settings)[0].detector.fired_at
