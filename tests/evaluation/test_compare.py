"""`coreward compare` and `coreward guard-calibration` on real run directories: a short `coreward map` of two
arms with the same config (so their paired differences are nothing), an arm made from one of them with its verified
accuracy raised by a known 10 points, evaluations of the demo policy compared per problem, and a collapsing cell the
guard must catch. What must hold: a known difference is recovered, an identical arm is shown equivalent at a generous
margin (and never "resolved"), Holm adjusts the family's p values, pairs are matched by seed or problem id."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from coreward.evaluation import compare, stats
from coreward.evaluation.calibration import calibrate
from tests.helpers.runs import RULE_CONFIG, coreward_here


pytestmark = pytest.mark.usefixtures("one_torch_thread")
SEEDS = (1, 2, 3)


def shifted_copy(run_dir: Path, to: Path, shift: float) -> None:
    """The run as it would read had its rollouts been verified `shift` more often at every step."""
    shutil.copytree(run_dir, to)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    for row in rows:
        if "verified_accuracy" in row:
            row["verified_accuracy"] += shift
    (to / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def tiny_map(memorized_policy, tmp_path_factory) -> Path:
    """Arms `same` and `twin` (one config, two files) × 3 seeds × 2 steps, and `shifted`: `same`'s runs with their
    verified accuracy 0.1 higher."""
    root = tmp_path_factory.mktemp("compare")
    for name in ("same", "twin"):
        (root / f"{name}.yaml").write_text(f"base: {RULE_CONFIG}\n")
    out = root / "map"
    done = coreward_here(
        "map", "--config", str(root / "same.yaml"), "--config", str(root / "twin.yaml"), "--lr", "1e-3",
        "--horizons", "2", "--seeds", ",".join(map(str, SEEDS)), "--jobs", "2", "--output", str(out),
        "--set", f"model.name_or_path={memorized_policy}", "--set", "grpo.per_device_train_batch_size=16",
        "--set", "grpo.max_completion_length=12", "--set", "data.eval_every=0", "--set", "grpo.save_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "map.json").read_text())
    for cell in [c for c in result["cells"] if c["reward"] == "same"]:
        run_dir = Path(cell["run_dir"])
        to = out / "runs" / "shifted" / run_dir.name
        shifted_copy(run_dir, to, 0.1)
        result["cells"].append({**cell, "reward": "shifted", "run_dir": str(to)})
    (out / "map.json").write_text(json.dumps(result))
    return out


def test_a_known_difference_is_recovered_an_identical_arm_is_equivalent_and_holm_adjusts(tiny_map):
    units = compare.load_units([str(tiny_map)])
    assert sorted({u.arm for u in units}) == ["same", "shifted", "twin"]
    assert sorted(u.key for u in units if u.arm == "same") == [(1e-3, s) for s in SEEDS]
    assert len(compare.load_units([str(tiny_map), str(tiny_map)])) == len(units)  # a cell given twice counts once
    twin, shifted = compare.compare(units, [("twin", "same"), ("shifted", "same")], margin=5.0)
    # +0.1 at every step is +10 points on every seed (the EMA is linear), whatever the runs learned
    assert shifted.comparison.n == 3 and shifted.comparison.mean == pytest.approx(10.0)
    assert shifted.comparison.resolved and shifted.comparison.p == pytest.approx(2 / 8)  # ±(all +) of 2^3
    # the same config and seed trains the same run: no difference, and equivalence within ±5 points shown
    assert twin.comparison.n == 3 and abs(twin.comparison.mean) < 1.0 and not twin.comparison.resolved
    assert twin.equivalence.equivalent and not shifted.equivalence.equivalent
    # Holm over the two: the smaller p is doubled, the larger never falls below it
    assert shifted.holm_p == pytest.approx(min(1.0, 2 * shifted.comparison.p))
    assert twin.holm_p >= shifted.holm_p and twin.holm_p >= twin.comparison.p
    # the same runs given as run directories, one arm a label: paired by their configs' seeds
    runs = [f"{arm}={tiny_map / 'runs' / arm / f'lr0.001_seed{s}'}" for arm in ("shifted", "same") for s in SEEDS]
    by_run = compare.load_units(runs)
    assert sorted(u.key for u in by_run if u.arm == "same") == [(s,) for s in SEEDS]
    [again] = compare.compare(by_run, [("shifted", "same")])
    assert again.comparison.mean == pytest.approx(10.0) and again.holm_p is None  # one comparison: nothing to adjust


def test_compare_command_prints_the_arms_and_the_paired_differences(tiny_map, tmp_path):
    done = coreward_here("compare", str(tiny_map), "--base", "same", "--margin", "5", "--json",
                         str(tmp_path / "c.json"))
    assert done.returncode == 0, done.stderr
    assert "| arm | units | figure | peak | drop peak → final | guard fired | collapsed | CPU-s |" in done.stdout
    # three seeds: the interval excludes 0 but the least sign-flip p is 2/8, so after Holm it is no finding
    assert ("- shifted − same: +10.0 [+10.0, +10.0] points over 3 pairs, sign-flip p 0.25, Holm p 0.5: not resolved "
            "after Holm (the uncorrected interval excludes 0, Holm p 0.5 ≥ 0.05)") in done.stdout
    assert "- twin − same:" in done.stdout and "within ±5 points: equivalent" in done.stdout
    saved = json.loads((tmp_path / "c.json").read_text())
    assert {c["a"] for c in saved["comparisons"]} == {"twin", "shifted"} and len(saved["units"]) == 9
    [shifted] = [c for c in saved["comparisons"] if c["a"] == "shifted"]
    assert shifted["resolved_uncorrected"] and not shifted["resolved"]  # the JSON says what the text says
    unknown = coreward_here("compare", str(tiny_map), "--base", "nope")
    assert unknown.returncode == 2 and "--base 'nope' is neither an arm" in unknown.stderr


def test_held_out_judges_final_and_best_kept_policies_once(tiny_map, monkeypatch):
    """The fair fight: each cell's final/ (and best/, or final/ again where the guard kept none) on held-out
    problems, cached in the run, so a second call evaluates nothing."""
    units = [u for u in compare.load_units([str(tiny_map)]) if u.arm in ("same", "twin")]
    judged = compare.heldout_units(units, "demo", problems=8, n=2, seed=0)
    assert all(0.0 <= u.value <= 1.0 and u.info["rollouts_final"] is not None for u in judged)
    assert all((u.source / compare.HELDOUT_FILE).is_file() for u in judged)
    final, best = compare.compare(judged, [("twin", "same")], margin=20.0)
    assert (final.what, best.what) == ("final", "best-kept")
    assert final.equivalence.equivalent  # the same policies, sampled alike

    def no_evaluation(*args, **kwargs):
        raise AssertionError("evaluated again")

    monkeypatch.setattr(importlib.import_module("coreward.evaluation.evaluate"), "evaluate", no_evaluation)
    again = compare.heldout_units(units, "demo", problems=8, n=2, seed=0)
    assert [u.value for u in again] == [u.value for u in judged]


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory) -> dict[str, Path]:
    """The demo policy evaluated twice (seeds 0 and 1) on 30 held-out problems, and a copy of the second whose first
    10 problems are all verified correct, its rows shuffled (pairs must be matched by problem id, not row)."""
    from coreward.evaluation import evaluate

    root = tmp_path_factory.mktemp("evaluations")
    for seed in (0, 1):
        evaluate("demo", benchmarks=["demo"], limit=30, n=4, seed=seed, output_dir=root / f"seed{seed}")
    better = root / "better"
    shutil.copytree(root / "seed1", better)
    samples = pd.read_parquet(better / "samples.parquet")
    first = sorted(samples["problem_id"].unique(), key=lambda p: samples[samples.problem_id == p].problem_index.iloc[0])[:10]
    samples.loc[samples["problem_id"].isin(first), "correct"] = True
    samples.sample(frac=1.0, random_state=0).to_parquet(better / "samples.parquet", index=False)
    results = json.loads((better / "results.json").read_text())
    results["benchmarks"]["demo"]["avg@4"] = float(samples["correct"].mean())
    (better / "results.json").write_text(json.dumps(results))
    return {"base": root / "seed0", "seed1": root / "seed1", "better": better, "first": first}


def test_paired_by_problem_matches_problem_ids_and_pools_the_pairs(evaluations):
    seed1 = pd.read_parquet(evaluations["seed1"] / "samples.parquet").groupby("problem_id")["correct"].mean()
    expected = 100 * sum(1.0 - seed1[p] for p in evaluations["first"]) / len(seed1)
    units = compare.load_units([f"better={evaluations['better']}", f"seed1={evaluations['seed1']}"])
    [result] = compare.compare(units, [("better", "seed1")], paired_by="problem")
    assert result.comparison.n == 30 and result.comparison.mean == pytest.approx(expected)
    # two evaluations of one arm against one base evaluation: 2 × 30 problem pairs, pooled; by seed, 2 pairs
    units = compare.load_units([f"base={evaluations['base']}", f"mine={evaluations['seed1']}",
                                f"mine={evaluations['better']}"])
    [pooled] = compare.compare(units, [("mine", "base")], paired_by="problem")
    [by_seed] = compare.compare(units, [("mine", "base")], paired_by="seed")
    assert pooled.comparison.n == 60 and by_seed.comparison.n == 2
    assert pooled.comparison.mean == pytest.approx(by_seed.comparison.mean)  # 30 problems each: the same mean
    done = coreward_here("compare", f"mine={evaluations['seed1']}", f"mine={evaluations['better']}",
                         "--base", str(evaluations["base"]), "--paired-by", "problem")
    assert done.returncode == 0, done.stderr
    assert "- mine − base:" in done.stdout and "over 60 problem pairs" in done.stdout
    assert "| arm | units | avg@n | pass@n | tokens | cut at the cap | answered |" in done.stdout


def test_guard_calibration_catches_a_collapse_and_a_long_patience_misses_it(tiny_map, tmp_path):
    """A cell whose verified accuracy climbs to 0.8 and falls to 0.1 while its reward holds: the defaults catch it
    before half its peak is lost; a patience longer than the fall misses it. The reference arm's cells raise no alarm."""
    out = tmp_path / "map"
    shutil.copytree(tiny_map, out)
    result = json.loads((out / "map.json").read_text())
    result["cells"] = [{**c, "run_dir": c["run_dir"].replace(str(tiny_map), str(out))} for c in result["cells"]]
    climbing = [0.2 + 0.015 * s for s in range(1, 41)]  # a reference cell long enough to judge: no alarm due
    collapsing = [0.2 + 0.04 * s for s in range(1, 16)] + [0.8 - 0.028 * s for s in range(1, 26)]
    for arm, verified in (("same", climbing), ("collapsing", collapsing)):
        run_dir = out / "runs" / arm / "lr0.001_seed9"
        run_dir.mkdir(parents=True)
        rows = [{"step": s, "reward": 0.5 + 0.005 * s, "verified_accuracy": v} for s, v in enumerate(verified, 1)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        result["cells"].append({"reward": arm, "lr": 1e-3, "seed": 9, "run_dir": str(run_dir), "status": "done"})
    (out / "map.json").write_text(json.dumps(result))

    defaults, variations, references = calibrate([out], ["patience=3,30"])
    assert references == ["same"]  # the map's reference row
    assert defaults.verdicts["detections"] == ["map/collapsing/lr0.001_seed9"]
    # 2-step cells are too short to judge (no peak before the warmup); the 40-step reference cell is judged
    assert defaults.verdicts["reference cells"] == ["map/same/lr0.001_seed9"] and defaults.verdicts["false alarms"] == []
    late = dict(variations)["patience=30"]  # 30 steps in a row: longer than the fall
    assert late.verdicts["missed collapses"] == ["map/collapsing/lr0.001_seed9"]
    done = coreward_here("guard-calibration", str(out), "--vary", "patience=3,30")
    assert done.returncode == 0, done.stderr
    assert "The defaults: 0/1 false alarms, 1/1 collapses detected before half the peak was lost" in done.stdout
    assert "- patience=30: " in done.stdout
    bad = coreward_here("guard-calibration", str(out), "--vary", "nope=1")
    assert bad.returncode == 2 and "KEY one of the guard's settings" in bad.stderr


def test_a_comparison_in_a_family_is_resolved_only_after_holm():
    """An interval that excludes 0 is a finding alone, or in a family when Holm's adjusted p is below 0.05."""
    excludes_zero = stats.Comparison(16, 5.0, 1.0, 9.0, 0.02)
    alone = compare.Result("a", "b", "final", "seed", excludes_zero)
    corrected_away = compare.Result("a", "b", "final", "seed", excludes_zero, holm_p=0.1)
    kept = compare.Result("a", "b", "final", "seed", excludes_zero, holm_p=0.04)
    spans_zero = compare.Result("a", "b", "final", "seed", stats.Comparison(16, 1.0, -3.0, 5.0, 0.6), holm_p=1.0)
    assert alone.resolved and kept.resolved and not corrected_away.resolved and not spans_zero.resolved
    assert corrected_away.to_dict()["resolved_uncorrected"] and not corrected_away.to_dict()["resolved"]
    assert corrected_away.verdict().startswith("not resolved after Holm") and spans_zero.verdict() == "not resolved"
