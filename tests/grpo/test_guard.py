"""The overoptimization guard (grpo/guard.py): its rule on curves of known shape, what it watches (and says it
watches), best/ on disk, then real runs: two against rewards whose hackability is known by construction
(tests/helpers/guard_rewards.py): one the policy satisfies without solving the problem (the alarm fires, the run
stops there with guard.stop, best/ is the model before the fall), one noisy but unbiased (no alarm); a run killed
after an alarm and a best/ write and resumed from the checkpoint before them; a run with nothing verified to watch.
Two processes, every engine: test_every_option.py."""

from __future__ import annotations

import json
import math
import random
import threading
import time
from types import SimpleNamespace

import pytest

from coreward.data.records import Record
from coreward.evaluation.guard import HELD_OUT, TRAINING, Detector, GuardSettings, alarm_step, replay
from coreward.grpo.checkpoints import mark_complete
from coreward.grpo.config import as_train_config
from coreward.grpo.guard import (
    BEST_DIR,
    BEST_INFO,
    GUARD_FILE,
    guard_signal,
    read_best,
    recover_best,
    replace_best,
)
from coreward.runtime.errors import CorewardError
from coreward.runtime.files import COMPLETE_MARKER
from coreward.runtime.metrics import read_metrics
from tests.helpers.kill_resume import launch, train_command
from tests.helpers.runs import RULE_CONFIG, coreward, tiny_train_args


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


def test_a_weighted_rule_reward_is_read_on_its_own_scale():
    """A rule reward of weight 0.5 logs reward = 0.5·v: read as that sum, it falls half as far as v, which the rule
    takes for a gap (an honest decline fired the alarm). Read as the source's own value (rewards/rule/mean = v), it
    falls as far as v: no alarm. A hackable source beside it still fires, weighted as the run weighs it."""
    verified, hacked = collapse()
    rows = [{"step": step, "verified_accuracy": v, "rewards/rule/mean": v, "reward": 0.5 * v}
            for step, v in enumerate(verified, start=1)]
    assert alarm_step([{k: r[k] for k in ("step", "verified_accuracy", "reward")} for r in rows]) is not None
    assert alarm_step(rows) is None
    mixed = [{**row, "rewards/hack/mean": h, "reward": 0.5 * row["verified_accuracy"] + 0.5 * h}
             for row, h in zip(rows, hacked)]
    assert alarm_step(mixed) is not None
    watch, _ = replay(mixed, weights={"rule": 0.5, "hack": 0.5})
    assert watch.detector.fired_at == alarm_step(mixed)  # equal weights: the same as unweighted
    assert replay(mixed, weights={"rule": 1.0, "hack": 0.0})[0].detector.fired_at is None  # the hack weighs nothing


def test_a_report_replays_the_guard_with_the_runs_own_weights(tmp_path):
    """A run trained without the guard: `coreward report` replays the rule on its metrics with the weights of its
    config.yaml, as the live guard would have read them: a hack of weight 0 beside the rule fires no alarm there,
    while the same rows read with every source at weight 1 do; two sources of one name are numbered as the trainer
    numbers their metrics."""
    from coreward.evaluation.overoptimization import guard_alarm, reward_weights
    from coreward.evaluation.plots import Run

    verified, hacked = collapse()
    rows = [{"step": step, "verified_accuracy": v, "rewards/rule/mean": v, "rewards/hack/mean": h, "reward": v}
            for step, (v, h) in enumerate(zip(verified, hacked), start=1)]
    weighed = {"rewards": [{"name": "rule", "weight": 1.0}, {"name": "hack", "weight": 0.0}]}
    assert reward_weights(weighed) == {"rule": 1.0, "hack": 0.0}
    assert guard_alarm(Run("weighed", tmp_path, rows, config=weighed)) == {"alarm_step": None, "alarm_logged": False}
    assert guard_alarm(Run("no config", tmp_path, rows))["alarm_step"] is not None  # every source at weight 1
    assert reward_weights({"rewards": [{"name": "model"}, {"name": "model", "weight": 0.5}, {"name": "x:Y"}]}) == {
        "model_0": 1.0, "model_1": 0.5, "x:Y_2": 1.0}


def test_the_guard_names_its_signal():
    """Training data with references: its rollouts' verified accuracy. Without: a held-out set with references
    (avg@N), else nothing, saying why (agree@N is no accuracy; no held-out set at all)."""
    from datasets import Dataset

    def trainer(answers):
        return SimpleNamespace(train_dataset=Dataset.from_dict({"prompt": ["q"] * len(answers), "answer": answers}),
                               reference_column="answer")

    labelled = [Record("a", "1+1?", "2", "mine", "test")]
    label_free = [Record("a", "1+1?", "", "mine", "test")]
    source, line = guard_signal(trainer(["2", "3"]), label_free, 4)
    assert source == TRAINING and "training rollouts' verified accuracy" in line
    source, line = guard_signal(trainer(["", ""]), labelled, 4, "mine")
    assert source == HELD_OUT and "the held-out set mine's eval/avg@4" in line
    source, line = guard_signal(trainer(["", ""]), label_free, 4, "mine")
    assert source is None and "watches nothing" in line and "eval/agree@4" in line and "no accuracy" in line
    source, line = guard_signal(trainer(["", ""]), None, 4)
    assert source is None and "no held-out set is evaluated (data.eval, data.eval_every)" in line


def write_best_dir(run_dir, step: int):
    written = run_dir / f".best-{step}"
    written.mkdir(parents=True)
    (written / "model.safetensors").write_bytes(b"x" * 1000)
    (written / BEST_INFO).write_text(json.dumps({"step": step, "verified": step / 100}))
    mark_complete(written)
    return written


def test_best_is_swapped_whole_by_one_rename(tmp_path):
    """A reader polling best/ while it is replaced 50 times always finds a complete best/ of some step, and in
    the end the last one; nothing of the replaced ones is left."""
    replace_best(tmp_path, write_best_dir(tmp_path, 1))
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            best = read_best(tmp_path)
            seen.append(None if best is None else best["step"])

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for step in range(2, 52):
            replace_best(tmp_path, write_best_dir(tmp_path, step))
            read_so_far, deadline = len(seen), time.monotonic() + 1
            while len(seen) == read_so_far and time.monotonic() < deadline:
                time.sleep(0.0005)  # let the reader run between replacements (on a loaded machine it may not)
    finally:
        stop.set()
        thread.join()
    assert seen and None not in seen and len(set(seen)) > 1
    assert read_best(tmp_path)["step"] == 51
    assert sorted(p.name for p in tmp_path.iterdir()) == [".best-51", BEST_DIR]


def test_recovery_drops_what_a_kill_left_and_keeps_best(tmp_path):
    replace_best(tmp_path, write_best_dir(tmp_path, 3))
    (tmp_path / ".best-5").mkdir()  # killed while writing step 5's, before its rename
    (tmp_path / ".best.link").symlink_to(".best-5")
    recover_best(tmp_path)
    assert read_best(tmp_path)["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [".best-3", BEST_DIR]
    # an older coreward's best/, a directory: it becomes a link, its record read as before
    legacy = tmp_path / "older"
    (legacy / BEST_DIR).mkdir(parents=True)
    (legacy / BEST_DIR / BEST_INFO).write_text(json.dumps({"step": 7, "verified": 0.5}))
    (legacy / BEST_DIR / COMPLETE_MARKER).write_text("{}")
    recover_best(legacy)
    assert (legacy / BEST_DIR).is_symlink() and read_best(legacy)["step"] == 7
    replace_best(legacy, write_best_dir(legacy, 9))
    assert read_best(legacy)["step"] == 9 and sorted(p.name for p in legacy.iterdir()) == [".best-9", BEST_DIR]


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
    best = read_best(run_dir)
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


# the rule with no drop required: the alarm fires at the first reading at or after the warm-up (drop 0, fall 0)
ALARM_AT_FIRST_READING = ["guard.min_drop=0", "guard.rel_drop=0", "guard.patience=1"]


def test_a_guarded_run_resumes_from_before_its_alarm_and_best(memorized_policy, tmp_path):
    """The alarm and best/ at step 2, after checkpoint-1; killed while checkpoint-2 is written, the run resumes from
    checkpoint-1: best/ of step 2 is a step it trains again (dropped), the alarm fires again at step 2, once in
    metrics.jsonl, best/ is rewritten, and guard.json and best/ agree with the rule replayed over the metrics."""
    run_dir = tmp_path / "run"
    overrides = [f"model.name_or_path={memorized_policy}", "data.limit=4", "data.eval_every=0",
                 "grpo.num_generations=4", "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=16",
                 "grpo.save_steps=1", "torch_threads=1", "guard.warmup=2", *ALARM_AT_FIRST_READING]
    killed = launch(train_command(RULE_CONFIG, run_dir, overrides, 2, resume=False), run_dir, kill="checkpoint:2")
    assert killed.killed, killed.log[-3000:]
    assert killed.log.count("guard: watches the training rollouts' verified accuracy") == 1
    assert "guard: step 2:" in killed.log and read_best(run_dir)["step"] == 2

    started = time.time()
    resumed = launch(train_command(RULE_CONFIG, run_dir, overrides, 2, resume=True), run_dir)
    assert resumed.returncode == 0, resumed.log[-3000:]
    assert resumed.resumed_from == str(run_dir / "checkpoint-1")
    assert "guard: step 2:" in resumed.log
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    assert [row["guard/alarm"] for row in rows] == [0, 1]
    summary = json.loads((run_dir / GUARD_FILE).read_text())
    assert summary["fired_at"] == 2 and summary["source"] == TRAINING
    best = read_best(run_dir)
    assert best["step"] == 2 and json.loads((run_dir / BEST_DIR / COMPLETE_MARKER).read_text())["time"] > started
    at_best = next(r for r in replay(rows, GuardSettings(**summary["settings"]))[1] if r.step == 2)
    assert math.isclose(best["verified"], at_best.verified)


def test_nothing_verified_to_watch_is_said_once_and_logs_no_guard_metrics(tiny_policy, tmp_path):
    """Label-free training data and a label-free held-out set (it logs eval/agree@N): the guard says it watches
    nothing, and why, once; no guard/* metric, no best/, no guard.json."""
    data = tmp_path / "unlabeled.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+{a}=?"}) + "\n" for a in range(4)))
    run_dir = tmp_path / "run"
    overrides = [f"model.name_or_path={tiny_policy}", f"data.train={data}", "data.columns.question=problem",
                 f"data.eval={data}", "data.eval_columns.question=problem", "data.eval_every=1", "data.eval_n=2",
                 "rewards=[{name: majority}]", "grpo.num_generations=4", "grpo.per_device_train_batch_size=8",
                 "grpo.max_completion_length=8", "grpo.save_steps=10", "torch_threads=1", "guard.warmup=1"]
    run = launch(train_command(RULE_CONFIG, run_dir, overrides, 2, resume=False), run_dir)
    assert run.returncode == 0, run.log[-3000:]
    assert run.log.count("guard: watches nothing") == 1 and "eval/agree@2" in run.log
    assert "guard:" not in run.log.replace("guard: watches nothing", "")
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert any("eval/agree@2" in row for row in rows) and len([row for row in rows if "reward" in row]) == 2
    assert not any(key.startswith("guard/") for row in rows for key in row)
    assert not (run_dir / BEST_DIR).exists() and not (run_dir / GUARD_FILE).exists()
