"""Every benchmark script still starts: `--help` parses its arguments after its top-level imports, so a script
left behind by a move (a renamed module, a removed function it imports) fails here, not in a user's hands.
benchmarks/README.md indexes every script, and every `benchmarks/...py` path the repository names exists (the
studies moved to benchmarks/studies/ must not leave a doc pointing at the old place).
What the scripts measure is run by `python benchmarks/readme_figures.py`, not by the suite (timings are not
tests)."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
# maintained benchmarks at the top of benchmarks/, one-off studies whose figure is recorded in benchmarks/studies/
SCRIPTS = sorted([*(REPO / "benchmarks").glob("*.py"), *(REPO / "benchmarks" / "studies").glob("*.py")])


def test_there_are_benchmarks():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO / "benchmarks")))
def test_benchmark_script_starts(script, monkeypatch, capsys):
    """As `python SCRIPT --help` runs it (its folder first on sys.path, run as `__main__`), in this process: the
    scripts' heavy imports (torch, transformers, TRL) are paid once, not once a script (4-5 s each for 4 of them)."""
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(script), run_name="__main__")
    assert exited.value.code in (0, None)
    assert "usage" in capsys.readouterr().out.lower()


def test_benchmarks_readme_indexes_every_script():
    index = (REPO / "benchmarks" / "README.md").read_text()
    listed = set(re.findall(r"\[`((?:studies/)?\w+\.py)`\]\(", index))  # each script's row links to it
    on_disk = {str(p.relative_to(REPO / "benchmarks")) for p in SCRIPTS}
    assert on_disk - listed == set(), "scripts benchmarks/README.md does not describe"
    assert listed - on_disk == set(), "scripts benchmarks/README.md names that do not exist"


def test_every_named_benchmark_script_exists():
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
    texts = [p for p in tracked if p.endswith((".md", ".py", ".yaml", ".toml")) and (REPO / p).exists()]
    missing = sorted({(path, named) for path in texts
                      for named in re.findall(r"(?<![\w/])benchmarks/[\w/]+\.py", (REPO / path).read_text())
                      if not (REPO / named).exists()})
    assert missing == [], "files naming a benchmark script that does not exist (file, script)"


def test_fair_fight_sign_flip_p_is_exact():
    """benchmarks/fair_fight.py: the two-sided sign-flip p enumerates every sign pattern: six differences of one sign
    are as extreme as only their own pattern and its mirror (2 of 64); differences around 0 are not extreme at all."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from fair_fight import sign_flip_p, t_interval
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    assert sign_flip_p([3.0, 1.0, 2.0, 5.0, 0.5, 4.0]) == pytest.approx(2 / 64)
    assert sign_flip_p([1.0, -1.0, 2.0, -2.0]) == 1.0
    assert sign_flip_p([10.0, 1.0, 1.0, 1.0]) == pytest.approx(2 / 16)  # only ±(all +): one big one and three small
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and low < 2.0 < high
