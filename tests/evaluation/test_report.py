"""`coreward report`: plots and report.md from hand-written metrics.jsonl files of two fake runs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreward.evaluation.plots import ema, load_run
from coreward.evaluation.report import make_report, run_labels
from coreward.runtime.errors import CorewardError


FIGURES = {"training_reward_accuracy.png", "validation_accuracy.png", "completion_length.png", "reward_model.png",
           "overoptimization.png"}


def write_run(path: Path, rows: list[dict], summary: dict | None = None) -> Path:
    path.mkdir(parents=True)
    lines = [json.dumps(row) for row in rows]
    (path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 9')  # a torn last line is ignored
    if summary:
        (path / "summary.json").write_text(json.dumps(summary))
    return path


@pytest.fixture
def two_runs(tmp_path) -> list[Path]:
    """A rule-reward run that learns, and a static-RM run that gets hacked (reward up, accuracy down)."""
    rule, hacked = [], []
    for step in range(1, 41):
        rule.append(
            {
                "step": step,
                "reward": 0.4 + 0.01 * step,
                "verified_accuracy": 0.4 + 0.01 * step,
                "completions/mean_length": 30 - 0.1 * step,
                "kl": 0.01,
                "kl/from_init": 0.01 * step,
                "verify/prompts_with_verified": 0.9,
            }
        )
        hacked.append(
            {
                "step": step,
                "reward": 0.5 + 0.012 * step,
                "verified_accuracy": 0.45 - 0.008 * step,
                "completions/mean_length": 30 + 0.5 * step,
                "rm/loss": 0.7 / math.sqrt(step),
                "rm/accuracy": min(1.0, 0.5 + 0.02 * step),
                "kl/from_init": 0.04 * step,
                # hacked: verified rollouts get rarer as the policy drifts
                "verify/prompts_with_verified": 1.0 - 0.02 * step,
            }
        )
        if step % 10 == 0:
            rule[-1].update({"eval/avg@4": 0.4 + 0.008 * step, "eval/maj@4": 0.5})
            hacked[-1].update({"eval/avg@4": 0.45 - 0.006 * step})
    rule.insert(0, {"step": 0, "eval/avg@4": 0.38})
    return [
        write_run(tmp_path / "runs" / "rule", rule, {"train_runtime": 125.4}),
        write_run(tmp_path / "runs" / "model", hacked),
    ]


def test_report_plots_and_summary(two_runs, tmp_path):
    out = tmp_path / "report"
    written = make_report(two_runs, out)
    assert {p.name for p in written} == FIGURES | {"report.md"}
    for name in FIGURES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    for name in FIGURES:
        assert f"]({name})" in report
    rows = {}  # the final-numbers table comes first
    for line in report.splitlines():
        if line.startswith("| "):
            rows.setdefault(line.split(" | ")[0].strip("| "), line)
    assert rows["rule"] == "| rule | 40 | 2m05s | 0.800 | 80.0% | 72.0% (avg@4) | 72.0% (40) |"
    assert rows["model"] == "| model | 40 | – | 0.980 | 13.0% | 21.0% (avg@4) | 39.0% (10) |"


def test_overoptimization_curves_and_table(two_runs, tmp_path):
    """The hacked run peaks at its first step and ends with reward far above verified accuracy; the rule run
    peaks at its last step with no gap. Values are read from the smoothed curves (smooth=0: the raw ones)."""
    from coreward.evaluation.overoptimization import summarize

    out = tmp_path / "report"
    make_report(two_runs, out, smooth=0)
    rule, hacked = (summarize(load_run(path), smooth=0) for path in two_runs)
    assert (rule.peak_step, hacked.peak_step) == (40, 1)
    assert rule.peak_sqrt_kl == pytest.approx(math.sqrt(0.4)) and hacked.peak_sqrt_kl == pytest.approx(0.2)
    assert rule.gap == pytest.approx(0.0) and rule.drop_from_peak == pytest.approx(0.0)
    assert hacked.gap == pytest.approx(0.98 - 0.13) and hacked.drop_from_peak == pytest.approx(0.442 - 0.13)
    assert hacked.final_coverage == pytest.approx(0.2)
    # a shorter horizon is read from the same run: at step 20 the hacked run has fallen less far
    early = summarize(load_run(two_runs[1]), smooth=0, upto_step=20)
    assert early.steps == 20 and early.final_verified == pytest.approx(0.29)
    report = (out / "report.md").read_text()
    assert "![Overoptimization](overoptimization.png)" in report
    assert "| model | 44.2% (1, 0.20) | 13.0% | 0.980 | +0.850 | 1.26 | 20.0% |" in report


def test_missing_metrics_are_skipped(tmp_path):
    run = write_run(tmp_path / "only_reward", [{"step": s, "reward": 0.1 * s} for s in range(1, 5)])
    written = make_report([run], tmp_path / "out", smooth=0)
    assert [p.name for p in written] == ["training_reward_accuracy.png", "report.md"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Not plotted (no run logged them): overoptimization (needs kl/from_init), held-out accuracy, held-out agreement (no reference answers), completion length, reward model." in report
    assert "| only_reward | 4 | – | 0.400 | – | – | – |" in report


def test_bad_run_directories_are_clear_errors(tmp_path):
    with pytest.raises(CorewardError, match="run directory not found: .*nowhere"):
        make_report([tmp_path / "nowhere"], tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorewardError, match="empty has no metrics.jsonl"):
        make_report([tmp_path / "empty"], tmp_path / "out")


def test_cli_report(two_runs, tmp_path):
    from coreward.cli import app

    runner = CliRunner()
    done = runner.invoke(app, ["report", *map(str, two_runs), "--output", str(tmp_path / "r"), "--smooth", "0.3"])
    assert done.exit_code == 0, done.output
    assert "report.md" in done.output


def test_cli_report_on_a_missing_run_dir_exits_2(tmp_path):
    missing = tmp_path / "nowhere"
    done = subprocess.run(
        [sys.executable, "-m", "coreward.cli", "report", str(missing), "--output", str(tmp_path / "r")],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert f"error: run directory not found: {missing}" in done.stderr


def test_labels_and_smoothing(tmp_path):
    a, b = tmp_path / "a" / "final", tmp_path / "b" / "final"
    assert run_labels([a, b]) == ["a/final", "b/final"]
    assert run_labels([a, tmp_path / "c"]) == ["final", "c"]
    assert ema([2.0, 2.0, 2.0], 0.9) == pytest.approx([2.0, 2.0, 2.0])  # debiased: no pull towards 0
    assert ema([1.0, 3.0], 0.0) == [1.0, 3.0]
    run = load_run(write_run(tmp_path / "r", [{"step": 1, "reward": float("nan")}, {"step": 2, "reward": 1}]))
    assert run.series("reward") == ([2], [1.0])


def test_reward_panel_splits_runs_by_scale_only_when_they_differ(tmp_path):
    """Self-certainty's reward (~12) next to [0, 1] rewards would flatten them: a panel per scale then."""
    from coreward.evaluation.plots import scale_groups

    def run(name, values):
        return load_run(write_run(tmp_path / name, [{"step": i + 1, "reward": v} for i, v in enumerate(values)]))

    a, b, c = run("a", [0.3, 0.6]), run("b", [11.8, 12.0]), run("c", [0.1, 0.9])
    assert scale_groups([a, b, c], "reward") == [[a, c], [b]]
    assert scale_groups([a, c], "reward") == [[a, c]]


def test_overoptimization_figure_gives_each_reward_scale_its_own_panel(tmp_path):
    """A self-certainty run (reward ~12) beside [0, 1] rewards would flatten them on one axis: the figure gets a
    reward panel per scale (one panel wider), and one reward panel when the scales agree."""
    from matplotlib.image import imread

    from coreward.evaluation.overoptimization import plot_curves

    def run(name, rewards):
        rows = [{"step": i + 1, "reward": r, "verified_accuracy": 0.5, "kl/from_init": 0.1 * i}
                for i, r in enumerate(rewards)]
        return load_run(write_run(tmp_path / name, rows))

    rule, certainty, cooper = run("rule", [0.3, 0.6, 0.7]), run("certainty", [11.5, 12.0, 12.1]), run("cooper", [0.2, 0.5, 0.6])
    width = {}
    for name, runs in (("split", [rule, certainty, cooper]), ("one", [rule, cooper])):
        path = plot_curves(runs, tmp_path / f"{name}.png", smooth=0)
        width[name] = imread(path).shape[1]
    assert width["split"] == pytest.approx(width["one"] * 3 / 2, rel=0.02)  # 3 panels (2 reward + verified) vs 2


def test_axes_show_change_honestly():
    from matplotlib.figure import Figure

    from coreward.evaluation.plots import honest_axes

    ax = Figure().subplots()
    ax.plot([1, 2, 3], [0.6425, 0.6440, 0.6450])
    honest_axes(ax, [0.6425, 0.6440, 0.6450])
    low, high = ax.get_ylim()
    assert high - low >= 0.1 - 1e-9  # a 0.0025 wiggle is not stretched over the whole panel
    assert all(float(t).is_integer() for t in ax.get_xticks())
    wide = Figure().subplots()
    wide.plot([1, 2], [0.0, 0.9])
    honest_axes(wide, [0.0, 0.9])
    assert wide.get_ylim()[1] - wide.get_ylim()[0] < 1.2  # a real change keeps matplotlib's own limits


def test_the_report_names_each_figures_smoothing_the_guards_stop_best_and_the_runs_own_evaluation(two_runs, tmp_path):
    """One run evaluated on 200 demo problems, its guard fired and stopped it, best/ kept; the report says so, and
    labels every verified accuracy with its smoothing (the table's EMA, the guard's own, or the last step's)."""
    import yaml

    model = two_runs[1]
    rows = [row for row in load_run(model).rows if row["step"] <= 14]  # it stopped at the guard's alarm
    (model / "metrics.jsonl").write_text("".join(json.dumps({**row, "guard/alarm": float(row["step"] == 14)}) + "\n"
                                                 for row in rows))
    (model / "config.yaml").write_text(yaml.safe_dump({"data": {"eval": "demo", "eval_split": "test", "eval_limit": 200,
                                                                "eval_n": 4, "eval_every": 10}}))
    guard = {"settings": {"smooth": 0.8}, "source": "training rollouts", "fired_at": 14, "stopped_at": 14,
             "peak": 0.431, "peak_step": 10, "best": {"step": 10, "verified": 0.431}}
    (model / "guard.json").write_text(json.dumps(guard))
    (model / "best").mkdir()
    make_report(two_runs, tmp_path / "out", smooth=0.6, note="A note from the caller.")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "model: avg@4 on 200 problems of demo (test split), every 10 steps" in report
    assert "500" not in report and "A note from the caller." in report
    guard_line = next(line for line in report.splitlines() if line.startswith("- **model**: the guard fired at step 14"))
    assert "training rollouts, EMA 0.8 (the guard's smoothing), whose peak was 43.1% at step 10" in guard_line
    assert "**the run stopped there** (guard.stop), at step 14" in guard_line
    assert f"the best model (step 10, verified accuracy 43.1%) is in `{(model / 'best').resolve()}`" in guard_line
    assert "| Peak verified, EMA 0.6 (step, √KL) | Final verified, EMA 0.6 |" in report
    assert "Verified acc., last step |" in report
    assert "| 14 (stopped) |" in report
    assert "- **rule**" not in report.split("## Overoptimization guard")[1].split("##")[0]  # no guard, no line
