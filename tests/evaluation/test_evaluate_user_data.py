"""`coreward eval` on a user's data: a file with its own column names through --columns, and a clear refusal
when the data has no reference answers (every metric is an accuracy against them)."""

from __future__ import annotations

import json
import subprocess
import sys

from coreward.data.synthetic import load_demo


def write_rows(path, with_answer: bool):
    rows = [{"problem": r.question, **({"solution": r.answer} if with_answer else {})} for r in load_demo("test", 3)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coreward.cli", *args], capture_output=True, text=True, timeout=300)


def test_eval_a_users_file_with_mapped_columns(memorized_policy, tmp_path):
    data = write_rows(tmp_path / "mine.jsonl", with_answer=True)
    done = run_cli("eval", "--model", str(memorized_policy), "--benchmarks", str(data), "--columns",
                   "question=problem,answer=solution", "--n", "2", "--output", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["benchmarks"][str(data)]["num_problems"] == 3 and "maj@2" in results["benchmarks"][str(data)]


def test_eval_refuses_data_without_references(memorized_policy, tmp_path):
    data = write_rows(tmp_path / "unlabeled.jsonl", with_answer=False)
    done = run_cli("eval", "--model", str(memorized_policy), "--benchmarks", str(data), "--columns", "question=problem",
                   "--n", "2", "--output", str(tmp_path / "out"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error: --benchmarks" in done.stderr and "no reference answers" in done.stderr
