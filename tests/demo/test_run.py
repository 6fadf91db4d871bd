"""`coreward demo` end to end on the shipped demo policy and RM, with a budget of a few steps."""

import json
import re
from pathlib import Path

import pytest

from coreward.demo.run import Budget, Stress, parse_methods, run_demo
from coreward.runtime.errors import CorewardError


def test_demo_runs_methods_and_stress_and_writes_table_results_and_reports(tmp_path, capfd):
    budget = Budget(steps=2, eval_problems=8, eval_n=2, curve_every=0, curve_problems=0,
                    stress=Stress(learning_rate=5e-4, steps=2, methods=("model", "cooper")))
    summary = run_demo(["rule", "model"], quick=False, output_dir=tmp_path, budget=budget)

    assert [row["method"] for row in summary["rows"]] == ["baseline", "rule", "model"]
    assert [row["method"] for row in summary["stress_rows"]] == ["model"]  # cooper was not asked for
    stress = summary["stress_rows"][0]
    assert all(0 <= stress[k] <= 1 for k in ("heldout_avg", "start_train_verified_accuracy", "train_verified_accuracy"))
    for row in summary["rows"][1:]:
        assert 0 <= row["train_verified_accuracy"] <= 1 and row["train_reward"] is not None

    table = (tmp_path / "table.md").read_text()
    assert "| Baseline (no RL) |" in table and "| Rule-based (GT-GRPO) |" in table
    assert "Stress: learning rate 0.0005, 2 steps" in table and table.count("| Static reward model |") == 2
    assert json.loads((tmp_path / "results.json").read_text())["table"] == table.strip()
    # a table from fewer than the full setting says so on its face; its columns say the steps they average; each
    # arm's difference from the baseline comes with its paired interval over the problems, which holds it
    assert table.startswith("**Pipeline check, not a result**: 2 steps, 8 held-out problems x 2 samples"), table
    assert "| Train reward, mean of steps 1-2 |" in table and "last 5" not in table
    assert "(train columns: mean of steps 1-2 → mean of steps 1-2)" in table
    for row in summary["rows"][1:] + summary["stress_rows"]:
        low, high = row["heldout_delta_ci"]
        assert low <= row["heldout_avg"] - summary["rows"][0]["heldout_avg"] <= high, row
    rule_row = next(line for line in table.splitlines() if line.startswith("| Rule-based"))
    assert re.search(r"\| [+-]\d+\.\d \[[+-]\d+\.\d, [+-]\d+\.\d\] \|", rule_row), rule_row
    assert (tmp_path / "report" / "training_reward_accuracy.png").is_file()
    assert (tmp_path / "stress" / "report" / "training_reward_accuracy.png").is_file()
    # the stress run trained at the stress learning rate, for the stress budget
    stress_metrics = [json.loads(line) for line in (tmp_path / "stress" / "model" / "metrics.jsonl").open()]
    assert max(r["step"] for r in stress_metrics) == 2
    assert "learning_rate: 0.0005" in (tmp_path / "stress" / "model" / "config.yaml").read_text()
    # what the user watches: a line per step of each run (2 main runs and the stress row, 2 steps each), a result
    # line per row
    lines = capfd.readouterr().out.splitlines()
    assert sum(bool(re.match(r"\s+step [12]/2: reward ", line)) for line in lines) == 6, lines
    # each step's own time apart from the run's total
    assert all(re.search(r"\(step \d+ s, total \d+ s\)$", line) for line in lines if re.match(r"\s+step \d/2:", line))
    assert any(line.startswith("Rule-based (GT-GRPO): held-out avg@2 = ") for line in lines)
    assert any(line.startswith("stress, Static reward model: held-out avg@2 = ") for line in lines)


def test_the_stress_rows_hold_the_recommended_co_optimized_setting_beside_cooper_as_its_authors_ran_it(tmp_path):
    """The full demo's stress rows: rule, the frozen RM, Cooper (the authors' assistant negatives) and, when Cooper is
    asked for, configs/demo/co_optimized.yaml (rollout negatives) at the same learning rate, steps and seed."""
    from coreward.demo.run import FULL, plan_runs

    runs = [run for run in plan_runs(["rule", "model", "cooper"], FULL, 7, tmp_path) if run.stress]
    assert [run.method for run in runs] == ["rule", "model", "cooper", "co_optimized"]
    configs = {run.method: run.config() for run in runs}
    assert configs["cooper"].rewards[0].params["negative"] == "assistant"
    assert configs["co_optimized"].rewards[0].params["negative"] == "rollout"
    for run in runs:
        assert configs[run.method].grpo["learning_rate"] == FULL.stress.learning_rate
        assert configs[run.method].grpo["max_steps"] == FULL.stress.steps and configs[run.method].seed == 7
    assert runs[-1].title == "stress, Cooper, rollout negatives (co_optimized.yaml)"
    assert runs[-1].run_dir == tmp_path / "stress" / "co_optimized"
    # without Cooper, no co-optimized row; the main rows never hold it
    assert "co_optimized" not in [run.method for run in plan_runs(["rule", "model"], FULL, 7, tmp_path)]
    assert "co_optimized" not in [run.method for run in plan_runs(["cooper"], FULL, 7, tmp_path) if not run.stress]


def test_unknown_demo_method_is_an_error_that_lists_the_known_ones():
    with pytest.raises(CorewardError, match="unknown method nope.*known: rule"):
        parse_methods("rule,nope")


def test_a_demo_never_overwrites_earlier_results(tmp_path, monkeypatch):
    from coreward.demo.run import demo_output_dir, report_paths
    from coreward.runtime.errors import CorewardError

    monkeypatch.chdir(tmp_path)
    assert demo_output_dir(None, overwrite=False) == Path("runs/demo")
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "table.md").write_text("earlier")
    second = demo_output_dir(None, overwrite=False)
    assert second != Path("runs/demo") and second.name.startswith("demo-")  # a new directory, the old one kept
    with pytest.raises(CorewardError, match="already holds demo results.*--overwrite"):
        demo_output_dir("runs/demo", overwrite=False)
    assert demo_output_dir("runs/demo", overwrite=True) == Path("runs/demo")
    paths = report_paths(Path("runs/demo"), {"stress_rows": [{}]})
    assert [str(p) for p in paths] == ["runs/demo/table.md", "runs/demo/report/report.md",
                                       "runs/demo/stress/report/report.md"]


def test_demo_over_seeds_side_by_side_reports_mean_and_std_and_equals_the_runs_made_one_at_a_time(tmp_path):
    """Two seeds made one at a time in this process: the table shows mean ± std and results.json keeps each
    seed's value. Then seed 3 again with `--jobs 2` (each run a `coreward train` process of its own, one torch
    thread, the method and its stress row side by side): the same numbers (same seed, configs and machine)."""
    from coreward.demo.run import run_demo_seeds

    budget = Budget(steps=1, eval_problems=8, eval_n=2, curve_every=0, curve_problems=0,
                    stress=Stress(learning_rate=5e-4, steps=1, methods=("rule",)))
    one = run_demo_seeds(["rule"], quick=False, output_dir=tmp_path / "one", seeds=[3, 4], budget=budget)

    results = json.loads((tmp_path / "one" / "results.json").read_text())
    assert results["seeds"] == [3, 4] and [r["method"] for r in results["rows"]] == ["baseline", "rule"]
    for seed, index in ((3, 0), (4, 1)):  # each seed's own run, and its value kept in the combined results
        own = json.loads((tmp_path / "one" / f"seed-{seed}" / "results.json").read_text())
        assert own["seed"] == seed
        assert results["rows"][1]["heldout_avg"][index] == own["rows"][1]["heldout_avg"]
        assert results["stress_rows"][0]["train_reward"][index] == own["stress_rows"][0]["train_reward"]
    table = (tmp_path / "one" / "table.md").read_text()
    assert "2 seeds (3, 4)" in table and table == one["table"] + "\n"
    rule_row = next(line for line in table.splitlines() if line.startswith("| Rule-based"))
    assert rule_row.count(" ± ") == 4  # held-out, Δ, reward, verified accuracy

    # seed 3 again, side by side: the same numbers as seed 3's runs made one at a time
    two = run_demo_seeds(["rule"], quick=False, output_dir=tmp_path / "two", seeds=[3], budget=budget, jobs=2)
    seed_3 = json.loads((tmp_path / "one" / "seed-3" / "results.json").read_text())
    numbers = ("heldout_avg", "train_reward", "train_verified_accuracy")
    for key in ("rows", "stress_rows"):
        assert [[r[k] for k in numbers] for r in two[key]] == [[r[k] for k in numbers] for r in seed_3[key]], key
    assert two["table"] == (tmp_path / "one" / "seed-3" / "table.md").read_text().strip()
    for run in ("rule", "stress/rule"):  # the same run directories, each with its own log
        assert (tmp_path / "two" / run / "final" / "model.safetensors").is_file()
        assert (tmp_path / "two" / f"{run}.log").is_file()
