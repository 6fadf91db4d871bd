"""`coreward eval` on a user's data: a file with its own column names through --columns, and data with
no reference answers, which gets the label-free agree@n and answered instead of accuracies."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from coreward.data.synthetic import load_demo
from tests.helpers.runs import coreward_in


def write_rows(path, with_answer: bool):
    rows = [{"problem": r.question, **({"solution": r.answer} if with_answer else {})} for r in load_demo("test", 3)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return coreward_in(Path.cwd(), *args, env=dict(os.environ), timeout=300)


def test_eval_a_users_file_with_mapped_columns(memorized_policy, tmp_path):
    """The answer is read from the mapped column: beside it sits a column named `answer` (the default name) holding
    wrong answers, so reading that one (or the question) would score other figures than those asserted."""
    records = load_demo("train", 3)  # problems the memorized policy solves, so accuracy is not 0 either way
    solutions = [r.answer for r in records]
    decoys = [str(int(a) + 1) for a in solutions]
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"problem": r.question, "solution": s, "answer": d}) + "\n"
                            for r, s, d in zip(records, solutions, decoys)))
    done = run_cli("eval", "--model", str(memorized_policy), "--benchmarks", str(data), "--columns",
                   "question=problem,answer=solution", "--n", "2", "--temperature", "0", "--output", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "results.json").read_text())["benchmarks"][str(data)]
    assert result["num_problems"] == 3 and result["labelled"] is True
    samples = pd.read_parquet(tmp_path / "out" / "samples.parquet").sort_values(["problem_index", "sample_index"])
    assert samples["gold"].tolist() == [s for s in solutions for _ in range(2)]  # the mapped column, not `answer`
    # accuracy worked out here from what the model wrote: its final answer against each column
    written = [c.rsplit("####", 1)[-1].strip() if "####" in c else None for c in samples["completion"]]
    against = {name: sum(w == a for w, a in zip(written, [x for x in column for _ in range(2)])) / len(written)
               for name, column in (("solution", solutions), ("answer", decoys))}
    assert against["solution"] > 0 and against["answer"] == 0  # the two columns score differently
    assert result["avg@2"] == pytest.approx(against["solution"])
    assert samples["correct"].tolist() == [w == s for w, s in zip(written, samples["gold"])]


def test_eval_on_data_without_references_reports_label_free_figures(memorized_policy, tmp_path):
    data = write_rows(tmp_path / "unlabeled.jsonl", with_answer=False)
    done = run_cli("eval", "--model", str(memorized_policy), "--benchmarks", str(data), "--columns", "question=problem",
                   "--n", "2", "--output", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "results.json").read_text())["benchmarks"][str(data)]
    assert result["labelled"] is False and "avg@2" not in result and "maj@2" not in result
    assert 0 < result["agree@2"] <= result["answered"] <= 1  # unanswered samples are in no majority
    assert "agree@2" in done.stdout and "avg@2" not in done.stdout
    samples = pd.read_parquet(tmp_path / "out" / "samples.parquet")
    assert "majority_answer" in samples.columns and samples["correct"].isna().all()
