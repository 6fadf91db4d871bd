"""Every benchmark script still starts: `--help` parses its arguments after its top-level imports, so a script
left behind by a move (a renamed module, a removed function it imports) fails here, not in a user's hands.
What the scripts measure is run by `python benchmarks/readme_figures.py`, not by the suite (timings are not
tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))


def test_there_are_benchmarks():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_starts(script):
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()
