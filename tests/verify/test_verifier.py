"""The Verifier as every caller sees it: MATH-500's reference solutions, and one verdict for the CLI and
the training reward."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


DATA = Path(os.environ.get("COREWARD_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")


@pytest.fixture(scope="module")
def math500():
    path = DATA / "math500" / "math500_test.json"
    if not path.is_file():
        pytest.skip(f"MATH-500 not found at {path} (set COREWARD_DATA)")
    return json.loads(path.read_text())


def test_math500_reference_solutions_verify_and_do_not_match_the_next_answer(verifier, math500):
    solutions = [row["solution"] for row in math500]
    answers = [row["answer"] for row in math500]
    own = verifier.verify_completions(solutions, answers)
    assert [a for a, r in zip(answers, own) if not r.correct] == []
    assert sum(r.timed_out for r in own) == 0
    nxt = answers[1:] + answers[:1]
    same_value = verifier.equivalent(answers, nxt)  # neighbours that are truly equal don't count
    other = verifier.verify_completions(solutions, nxt)
    false_matches = [(a, b) for a, b, r, same in zip(answers, nxt, other, same_value) if r.correct and not same]
    assert false_matches == []


CASES = [
    ("0.5", "\\frac{1}{2}"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("\\boxed{1} and \\boxed{2}", "1, 2"),
    ("It is either $\\boxed{3}$ or $\\boxed{5}$.", "5"),
    ("We get 7 apples in total. \\boxed{}", "7"),
    ("x" * 150_000 + " so \\boxed{4}", "4"),  # clipped the same way by both
]


def test_cli_and_training_give_the_same_verdict(verifier, tmp_path):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps({"pred": p, "gold": g}) + "\n" for p, g in CASES))
    output = tmp_path / "verdicts.jsonl"
    command = [sys.executable, "-m", "coreward.cli", "verify", "--input", str(source), "--output", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    cli = [json.loads(line) for line in output.read_text().splitlines()]
    training = verifier.verify_completions([p for p, _ in CASES], [g for _, g in CASES])
    assert cli == [{"correct": r.correct, "extracted": r.extracted} for r in training]
    assert [r.correct for r in training] == [True, True, True, False, False, True]
