"""`coreward verify` through the real entry point (`python -m coreward.cli`), in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run_cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "coreward.cli", "verify", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    "pred, gold, expected",
    [
        ("Adding them up, the total is $\\boxed{\\frac{1}{2}}$.", "0.5", "true"),
        ("0.5", "\\frac{1}{2}", "true"),  # a bare answer
        ("#### 1,234", "1234", "true"),
        ("so \\boxed{(1+x)}", "x+1", "true"),  # needs math-verify in a worker
        ("0.6", "\\frac{1}{2}", "false"),
        ("I am not sure.\nMaybe 3?", "3", "false"),  # no answer
    ],
)
def test_single_prediction(pred, gold, expected):
    result = run_cli(pred, "--gold", gold)
    assert (result.returncode, result.stdout.strip()) == (0, expected), result.stderr


def test_last_number_fallback():
    assert run_cli("we get 42 apples", "--gold", "42").stdout.strip() == "false"
    assert run_cli("we get 42 apples", "--gold", "42", "--last-number-fallback").stdout.strip() == "true"


def test_file_mode_writes_one_verdict_per_line_in_order(tmp_path):
    rows = [
        {"pred": "... \\boxed{\\dfrac{3}{4}}", "gold": "0.75"},
        {"pred": "#### 7", "gold": "8"},
        {"pred": None, "gold": 3},
        {"pred": "The answer is 10\x00.", "gold": 10},
        {"pred": "x" * 100_000 + "\\boxed{" + "(" * 300 + "1" + ")" * 300 + "}", "gold": "1"},
    ]
    source = tmp_path / "pairs.jsonl"
    source.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n")
    output = tmp_path / "verdicts.jsonl"
    result = run_cli("--input", str(source), "--output", str(output), "--timeout", "2")
    assert result.returncode == 0, result.stderr
    verdicts = [json.loads(line) for line in output.read_text().splitlines()]
    assert verdicts == [
        {"correct": True, "extracted": "\\dfrac{3}{4}"},
        {"correct": False, "extracted": "7"},
        {"correct": False, "extracted": None},
        {"correct": True, "extracted": "10"},
        {"correct": False, "extracted": "(" * 300 + "1" + ")" * 300},
    ]
    assert "2/5 correct" in result.stderr


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"pred": "1", "gold": "1"}', '{"pred": "1", '], "line 2: not valid JSON"),
        (['{"pred": "1"}'], "line 1: missing field 'gold'"),
        (['{"gold": "1"}'], "line 1: missing field 'pred'"),
        (['{"pred": 5, "gold": "1"}'], "line 1: field 'pred' must be a string"),
        (['["1", "1"]'], "line 1: expected a JSON object"),
    ],
)
def test_bad_input_file_names_file_line_and_field(tmp_path, lines, message):
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join(lines) + "\n")
    result = run_cli("--input", str(source), "--output", str(tmp_path / "out.jsonl"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and str(source) in result.stderr and message in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input", "/nonexistent/pairs.jsonl", "--output", "out.jsonl"], "/nonexistent/pairs.jsonl: no such file"),
        (["5"], "PRED needs --gold"),
        (["5", "--gold", "5", "--timeout", "0"], "--timeout must be > 0"),
        ([], "give either PRED"),
        (["--input", "x.jsonl"], "x.jsonl: no such file"),  # without --output the verdicts go to standard output
    ],
)
def test_usage_errors(args, message):
    result = run_cli(*args)
    assert result.returncode == 2 and message in result.stderr


def test_input_without_output_writes_verdicts_to_standard_output(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"pred": "so \\\\boxed{4}", "gold": "4"}\n{"pred": "no idea at all", "gold": "4"}\n')
    result = run_cli("--input", str(pairs))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [{"correct": True, "extracted": "4"}, {"correct": False, "extracted": None}]
