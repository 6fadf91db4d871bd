"""`coreward rm annotate --from-samples`: the completions a real `coreward eval` wrote become labelled RM rows (the
question and reference from the same data, the rule's label), without sampling again; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
from typer.testing import CliRunner

from coreward.cli import app


def test_an_evals_samples_become_rows_labelled_as_the_eval_scored_them(tmp_path):
    from coreward.data.benchmarks import load_benchmark

    runner = CliRunner()
    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", "--model", "demo", "--benchmarks", "demo", "--split", "test", "--n", "3",
                                 "--limit", "12", "--output", str(out)])
    assert result.exit_code == 0, result.output[-2000:]
    samples = pd.read_parquet(out / "samples.parquet")

    rows_path = tmp_path / "rows.jsonl"
    result = runner.invoke(app, ["rm", "annotate", "--data", "demo", "--split", "test", "--from-samples", str(out),
                                 "--output", str(rows_path)])
    assert result.exit_code == 0, result.output[-2000:]
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert len(rows) == len(samples) == 36
    questions = {record.id: record for record in load_benchmark("demo", split="test")}
    for row, sample in zip(rows, samples.itertuples()):
        record = questions[sample.problem_id]
        assert row["question"] == record.question and row["reference_answer"] == record.answer
        assert row["completion"] == sample.completion
        assert row["label"] == int(sample.correct)  # the rule verifier agrees with the eval's own scoring
    report = json.loads((tmp_path / "rows.jsonl.report.json").read_text())
    assert report["positives"] == int(samples["correct"].sum()) and report["kept"] == 36


def test_the_first_k_samples_of_each_problem_and_only_problems_with_both_labels(tmp_path):
    """--samples-per-problem 2 --pairs-only: an eval at n = 3 gives the rows an eval at n = 2 would, and of them only
    the problems with a right and a wrong sample (a held-out file for Cooper's pair accuracy)."""
    runner = CliRunner()
    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", "--model", "demo", "--benchmarks", "demo", "--split", "test", "--n", "3",
                                 "--limit", "24", "--output", str(out)])
    assert result.exit_code == 0, result.output[-2000:]
    first_two = pd.read_parquet(out / "samples.parquet").query("sample_index < 2")
    both = {pid for pid, group in first_two.groupby("problem_id") if group["correct"].nunique() == 2}
    assert both and len(both) < first_two["problem_id"].nunique()  # the filter has something to keep and to drop

    rows_path = tmp_path / "pairs.jsonl"
    result = runner.invoke(app, ["rm", "annotate", "--data", "demo", "--split", "test", "--from-samples", str(out),
                                 "--samples-per-problem", "2", "--pairs-only", "--output", str(rows_path)])
    assert result.exit_code == 0, result.output[-2000:]
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert sorted(row["id"] for row in rows) == sorted(f"{pid}/{i}" for pid in both for i in (0, 1))
    report = json.loads((tmp_path / "pairs.jsonl.report.json").read_text())
    assert report["kept"] == len(rows) == 2 * len(both) and report["positives"] == report["negatives"] == len(both)


def _annotate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coreward.cli", "rm", "annotate", *args], capture_output=True,
                          text=True, timeout=120)


def test_samples_from_other_data_or_no_source_are_one_line_errors(tmp_path):
    samples = tmp_path / "samples.parquet"
    pd.DataFrame({"problem_id": ["nowhere-1"], "sample_index": [0], "completion": ["4"]}).to_parquet(samples)
    rows = str(tmp_path / "rows.jsonl")
    wrong_data = _annotate("--data", "demo", "--from-samples", str(samples), "--output", rows)
    no_source = _annotate("--data", "demo", "--output", rows)
    (tmp_path / "bad.parquet").write_text("not parquet")
    unreadable = _annotate("--data", "demo", "--from-samples", str(tmp_path / "bad.parquet"), "--output", rows)
    per_problem_alone = _annotate("--data", "demo", "--policy", "demo", "--samples-per-problem", "2", "--output", rows)
    for result, says in ((wrong_data, "not in the data (first: nowhere-1)"), (no_source, "give one of --policy"),
                         (per_problem_alone, "--samples-per-problem picks among an eval's samples"),
                         (unreadable, "bad.parquet: not readable")):
        assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr, result.stderr
