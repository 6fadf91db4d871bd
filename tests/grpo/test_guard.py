"""The overoptimization guard (grpo/guard.py): its rule on curves of known shape, then two real runs against rewards
whose hackability is known by construction (tests/helpers/guard_rewards.py): one the policy satisfies without
solving the problem (the alarm fires, the run stops there with guard.stop, best/ is the model before the fall),
one noisy but unbiased (no alarm)."""

from __future__ import annotations

import json
import math
import random

import pytest

from coreward.evaluation.guard import Detector, GuardSettings, alarm_step, replay
from coreward.grpo.config import as_train_config
from coreward.grpo.guard import BEST_DIR, BEST_INFO, GUARD_FILE
from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics
from tests.helpers.runs import coreward, tiny_train_args


def rows_of(verified, reward, noise=0.0, seed=0):
    """Metrics rows: per-step verified accuracy and reward of the rollouts, each with binomial-like noise."""
    rng = random.Random(seed)
    rows = []
    for step, (v, r) in enumerate(zip(verified, reward), start=1):
        e = rng.gauss(0, noise)
        rows.append({"step": step, "verified_accuracy": v + e, "reward": r + e + rng.gauss(0, noise / 2)})
    return rows


def collapse(steps=80, peak_at=35, peak=0.62, floor=0.2):
    """A static RM's run: verified accuracy climbs to `peak`, then falls to `floor`, while the reward keeps rising."""
    verified = [0.35 + (peak - 0.35) * min(t, peak_at) / peak_at - (peak - floor) * max(0, t - peak_at) / (steps - peak_at)
                for t in range(1, steps + 1)]
    reward = [0.35 + 0.5 * t / steps for t in range(1, steps + 1)]
    return verified, reward


@pytest.mark.parametrize("seed", range(5))
def test_fires_on_a_collapse_before_half_the_peak_is_lost(seed):
    verified, reward = collapse()
    rows = rows_of(verified, reward, noise=0.03, seed=seed)
    fired = alarm_step(rows)
    assert fired is not None and fired > 35
    assert verified[fired - 1] > 0.62 / 2  # the true accuracy there is still above half its peak


@pytest.mark.parametrize("seed", range(5))
def test_never_fires_when_the_reward_is_the_verifier(seed):
    """The rule reward: r = v exactly, through a rise, a fall of a third and noise: the gap never opens."""
    verified, _ = collapse()
    rng = random.Random(seed)
    rows = []
    for step, v in enumerate(verified, start=1):
        value = v + rng.gauss(0, 0.05)
        rows.append({"step": step, "verified_accuracy": value, "reward": value})
    watch, readings = replay(rows)
    assert watch.detector.fired_at is None
    assert max(r.drop for r in readings) > 0.2  # the accuracy did fall: the reward fell with it


def test_a_reward_off_the_accuracy_scale_is_read_by_its_range():
    """Self-certainty-like rewards (about 12, rising) behave as their [0, 1] rescaling does."""
    verified, reward = collapse()
    scaled = [12 + 4 * r for r in reward]
    assert alarm_step(rows_of(verified, scaled)) == alarm_step(rows_of(verified, reward))
    falling = [12 + 4 * v for v in verified]  # a reward that falls as the accuracy does: no alarm
    assert alarm_step(rows_of(verified, falling)) is None


def test_label_free_runs_are_watched_on_their_held_out_evaluation():
    verified, reward = collapse()
    rows = [{"step": t, "reward": r} for t, r in enumerate(reward, start=1)]  # no verified_accuracy: no references
    for row in rows:
        if row["step"] % 5 == 0:
            row["eval/avg@4"] = verified[row["step"] - 1]
    watch, readings = replay(rows)
    assert watch.source == "held-out evaluation"
    assert {r.step for r in readings} <= set(range(5, 81, 5))
    assert watch.detector.fired_at is not None and verified[watch.detector.fired_at - 1] > 0.31


def test_the_detector_fires_once():
    detector = Detector(GuardSettings(warmup=1, patience=1))
    alarms = [detector.observe(t, r, v).alarm for t, (v, r) in enumerate(zip(*collapse()), start=1)]
    assert sum(alarms) == 1


@pytest.mark.parametrize("key,value", [("patience", 0), ("gap_share", 1.0), ("smooth", 1.0), ("rel_drop", -0.1)])
def test_bad_settings_name_their_key(key, value):
    with pytest.raises(CorewardError, match=f"guard.{key}"):
        as_train_config(None, [f"guard.{key}={value}"]).validate()


# ------------------------------------------------------------------------------------------- real training runs
def guard_run(tiny_or_demo_args, run_dir, reward, *extra):
    return coreward(*tiny_or_demo_args, "--set", f"rewards=[{{name: tests.helpers.guard_rewards:{reward}}}]", *extra)


def demo_args(run_dir, steps):
    # the demo task and policy, 4x the demo's learning rate: the policy moves within a few steps
    return tiny_train_args("demo", run_dir, "--max-steps", str(steps), "--set", "grpo.per_device_train_batch_size=64",
                           "--set", "grpo.max_completion_length=32", "--set", "grpo.learning_rate=2e-4",
                           "--set", "grpo.save_steps=100", "--set", "torch_threads=1", "--set", "guard.warmup=4")


def test_a_hackable_reward_fires_the_alarm_and_stops_the_run_with_its_best_model_kept(tmp_path):
    run_dir = tmp_path / "run"
    result = guard_run(demo_args(run_dir, 30), run_dir, "wrong_answers", "--set", "guard.stop=true")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(run_dir / "metrics.jsonl")
    fired = [row["step"] for row in rows if row.get("guard/alarm") == 1]
    assert len(fired) == 1 and all(row.get("guard/alarm") == 0 for row in rows if row["step"] != fired[0])
    step = fired[0]
    assert rows[-1]["step"] == step < 30  # stopped at the alarm
    assert f"stopped by the overoptimization guard at step {step}" in result.stdout
    assert "the reward is being overoptimized" in result.stdout
    summary = json.loads((run_dir / GUARD_FILE).read_text())
    assert summary["fired_at"] == summary["stopped_at"] == step
    settings = GuardSettings(**summary["settings"])
    assert alarm_step(rows, settings) == step  # replayed on its metrics, the rule fires where the run's guard did
    best = json.loads((run_dir / BEST_DIR / BEST_INFO).read_text())
    assert best["step"] < step and (run_dir / BEST_DIR / "config.json").is_file()
    watch, readings = replay(rows, settings)
    at_best = next(r for r in readings if r.step == best["step"])
    assert math.isclose(best["verified"], at_best.verified) and at_best.verified >= max(
        r.verified for r in readings if r.step >= 4) - GuardSettings().best_min_gain
    assert (run_dir / "final" / "config.json").is_file()
    report = coreward("report", str(run_dir), "--output", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-3000:]
    table = (tmp_path / "report" / "report.md").read_text()
    assert f"| {step} |" in table  # the report's overoptimization table marks where the guard fired


def test_a_noisy_but_unbiased_reward_does_not_fire(tmp_path):
    run_dir = tmp_path / "run"
    result = guard_run(demo_args(run_dir, 12), run_dir, "noisy_rule")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(1, 13))
    assert all(row["guard/alarm"] == 0 for row in rows)
    assert json.loads((run_dir / GUARD_FILE).read_text())["fired_at"] is None
    assert "no overoptimization detected" in result.stdout
