"""The overoptimization guard's rule: the step where verified accuracy turns down while the reward holds.

grpo/guard.py runs it during training (the alarm, guard.stop, best/) and says what it is for; `replay` runs it over
a finished run's metrics, so `coreward report` and `coreward map` mark where it fired, or would have.
On the EMA-smoothed curves (weight `smooth`, TensorBoard's debiased EMA):

    after `warmup` steps, with P = the running peak of verified accuracy v (reached at step p) and R = the reward there,
    drop  = P − v_t                          ≥ max(min_drop, rel_drop · P)   (verified accuracy has turned down)
    fall  = R − r_t                          ≤ gap_share · drop             (the reward fell far less: the gap opened)
    both for `patience` logged steps in a row; it fires once.

The reward is read source by source, each source's own unweighted value (`rewards/NAME/mean`), and the falls are
averaged with the run's weights: a reward that is the verifier (the rule reward, r = v, at any weight) falls exactly
as far as v, so `fall = drop` and the rule never fires on it. A source off the [0, 1] scale of an accuracy
(self-certainty, entropy) is compared by its running min-max range: `fall / (max − min)`. The verified signal is the
training rollouts' `verified_accuracy` (data with references), else the periodic held-out evaluation
(`eval/avg@n`, a held-out set with references), unsmoothed, with a patience of at most 2. A held-out set without
references logs `eval/agree@n`, the share of samples on their majority answer: that is what the rewards that vote on
answers pay for, and it rises as a policy settles on one wrong answer, so the guard does not read it as accuracy.

The defaults (smooth 0.8, warm-up 10, a drop of 15% of the peak and at least 0.03, the reward falling by at most
half of that, 3 steps in a row) were chosen on the hackability map's cells at 4x the demo's learning rate
(`coreward guard-calibration`; the counts in docs/results.md, "The overoptimization guard and the KL axis"; the rule in
docs/explanation/guard.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any


EVAL_PATTERN = re.compile(r"eval/avg@\d+")
SOURCE_PATTERN = re.compile(r"rewards/([^/]+)/mean")
EVAL_PATIENCE = 2


def source_metric_names(names: list[str]) -> list[str]:
    """The names a run's reward sources log their metrics under (`rewards/NAME/mean`), from their names in order:
    the names themselves, or `NAME_i` (i its place) for every source when two share a name."""
    return names if len(set(names)) == len(names) else [f"{name}_{i}" for i, name in enumerate(names)]
TRAINING, HELD_OUT = "training rollouts", "held-out evaluation"  # the verified signal the guard watches


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
    """The alarm rule of the module docstring, fed one (step, rewards, verified) point at a time.

    `rewards` is each reward source's own value (its unweighted mean, `rewards/NAME/mean`), or one number. Each
    source is put on the accuracy's scale by itself (a source whose values stay in [0, 1] is on it; one off it is
    read by its running range), then the sources are averaged with the run's weights: the fall of a rule reward of
    weight 0.5 is its verified accuracy's fall, not half of it."""

    def __init__(self, settings: GuardSettings, sparse: bool = False, weights: dict[str, float] | None = None):
        self.settings = settings
        self.smooth = 0.0 if sparse else settings.smooth  # evaluation points are not smoothed
        self.patience = min(settings.patience, EVAL_PATIENCE) if sparse else settings.patience
        self.weights = weights or {}  # a source not named here weighs 1
        self._rewards: dict[str, _EMA] = {}
        self._verified = _EMA(self.smooth)
        self.current: dict[str, float] = {}  # each source's smoothed value (a source missing from a row keeps its last)
        self.low: dict[str, float] = {}  # each source's range so far (for a source off the [0, 1] scale)
        self.high: dict[str, float] = {}
        self.peak: float | None = None
        self.peak_step: int | None = None
        self.at_peak: dict[str, float] = {}  # each source's smoothed value at the peak
        self.streak = 0
        self.fired_at: int | None = None

    def observe(self, step: int, rewards: float | dict[str, float], verified: float) -> Reading:
        s = self.settings
        if not isinstance(rewards, dict):
            rewards = {"reward": rewards}
        for name, value in rewards.items():
            r = self._rewards.setdefault(name, _EMA(self.smooth))(value)
            self.current[name] = r
            self.low[name] = min(self.low.get(name, r), r)
            self.high[name] = max(self.high.get(name, r), r)
        v = self._verified(verified)
        new_best = False
        if step >= s.warmup and (self.peak is None or v > self.peak):
            self.peak, self.peak_step, self.at_peak, new_best = v, step, dict(self.current), True
        drop = self.peak - v if self.peak is not None else 0.0
        fall = self._fall() if self.peak is not None else 0.0
        opened = (self.peak is not None and drop >= max(s.min_drop, s.rel_drop * self.peak)
                  and fall <= s.gap_share * drop)
        self.streak = self.streak + 1 if opened else 0
        alarm = self.fired_at is None and self.streak >= self.patience
        if alarm:
            self.fired_at = step
        return Reading(step, self.reward(), v, self.peak, self.peak_step, drop, fall, opened, alarm, new_best)

    def weight(self, name: str) -> float:
        return float(self.weights.get(name, 1.0))

    def reward(self) -> float:
        """The sources' smoothed values, averaged with their weights (the run's reward, per unit of weight)."""
        total = sum(abs(self.weight(name)) for name in self.current)
        return sum(self.weight(name) * r for name, r in self.current.items()) / total if total else 0.0

    def _fall(self) -> float:
        """How far the reward fell since the peak, on the accuracy's scale: each source's fall on its own scale,
        averaged with the weights."""
        total = sum(abs(self.weight(name)) for name in self.at_peak)
        if not total:
            return 0.0
        return sum(self.weight(name) * (self.at_peak[name] - self.current[name]) / self.scale(name)
                   for name in self.at_peak) / total

    def scale(self, name: str) -> float:
        """1 for a source on an accuracy's [0, 1] scale; else its smoothed values' range so far."""
        if -0.01 <= self.low[name] and self.high[name] <= 1.01:
            return 1.0
        return max(self.high[name] - self.low[name], 1e-12)

    def off_scale(self) -> bool:
        """Some source is read by its range (it left the [0, 1] scale)."""
        return any(self.scale(name) != 1.0 for name in self.current)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def eval_key(row: dict[str, Any]) -> str | None:
    return next((k for k in row if EVAL_PATTERN.fullmatch(k) and _finite(row[k])), None)


def source_rewards(row: dict[str, Any]) -> dict[str, float]:
    """Each reward source's own value in a training row (`rewards/NAME/mean`, unweighted: TRL logs them beside the
    weighted sum); a row without them (older runs, hand-made rows) gives its `reward` as one source."""
    own = {match.group(1): float(value) for key, value in row.items()
           if (match := SOURCE_PATTERN.fullmatch(key)) and _finite(value)}
    if own:
        return own
    return {"reward": float(row["reward"])} if _finite(row.get("reward")) else {}



class Watch:
    """Feeds a run's logged rows to the right detector: the training rollouts' verified accuracy when the run logs
    it, else its held-out evaluation (label-free training data, a held-out set with references). `source` fixes
    which (the live guard knows it from its data before step 1); None infers it from the rows (a finished run)."""

    def __init__(self, settings: GuardSettings, source: str | None = None, weights: dict[str, float] | None = None):
        self.settings = settings
        self.dense = Detector(settings, weights=weights)
        self.sparse = Detector(settings, sparse=True, weights=weights)
        self.last_rewards: dict[str, float] = {}  # each source's latest smoothed training value (for evaluations)
        self._rewards: dict[str, _EMA] = {}
        self.source: str | None = source  # TRAINING | HELD_OUT
        self.fixed = source is not None

    def train_row(self, step: int, row: dict[str, Any]) -> Reading | None:
        """A training step's metrics (each source's reward, verified_accuracy); None when it carries no verified
        signal."""
        rewards = source_rewards(row)
        for name, value in rewards.items():
            self.last_rewards[name] = self._rewards.setdefault(name, _EMA(self.settings.smooth))(value)
        if self.source == HELD_OUT or not rewards or not _finite(row.get("verified_accuracy")):
            return None
        self.source = TRAINING
        return self.dense.observe(step, rewards, float(row["verified_accuracy"]))

    def eval_row(self, step: int, row: dict[str, Any]) -> Reading | None:
        """An evaluation's metrics (eval/avg@n): read only while the training rollouts have no verified signal."""
        key = eval_key(row)
        if key is None or self.source == TRAINING or not self.last_rewards:
            return None
        self.source = HELD_OUT
        return self.sparse.observe(step, dict(self.last_rewards), float(row[key]))

    @property
    def detector(self) -> Detector:
        return self.sparse if self.source == HELD_OUT else self.dense


def replay(rows: list[dict[str, Any]], settings: GuardSettings | None = None, source: str | None = None,
           weights: dict[str, float] | None = None) -> tuple[Watch, list[Reading]]:
    """The guard run over a finished run's metrics rows (one row per step: training metrics, and evaluation
    metrics on evaluation steps, which the live guard reads before that step's training metrics). Without
    `weights` every reward source weighs 1 (the same for a run of one source)."""
    watch, readings = Watch(settings or GuardSettings(), source, weights), []
    for row in rows:
        step = row.get("step")
        if not isinstance(step, int):
            continue
        for reading in (watch.eval_row(step, row), watch.train_row(step, row)):
            if reading is not None:
                readings.append(reading)
    return watch, readings


def alarm_step(rows: list[dict[str, Any]], settings: GuardSettings | None = None,
               weights: dict[str, float] | None = None) -> int | None:
    """The step at which the guard fires on these metrics rows (None: never); `weights` as `replay`'s."""
    return replay(rows, settings, weights=weights)[0].detector.fired_at
