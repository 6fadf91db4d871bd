"""The maintained benchmarks still start, and stay a package of harnesses: `--help` of each parses its arguments
after its top-level imports, so a harness left behind by a move (a renamed module, a removed function it imports)
fails here, not in a user's hands. None imports test machinery (tests.helpers) or edits sys.path: they share
benchmarks/_common.py as a package and run as `python -m benchmarks.GROUP.NAME`. benchmarks/run.py runs every
harness, benchmarks/README.md indexes each, and every benchmark path the repository names exists.
What the harnesses measure is run by `python benchmarks/run.py`, not by the suite (timings are not tests);
one-off studies live in studies/, each pinned to the commit it ran at, and are not started here."""

from __future__ import annotations

import ast
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import run


REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
GROUPS = ("speed", "memory", "gpu", "verification")
HARNESS_FILES = sorted(p for group in GROUPS for p in (BENCHMARKS / group).glob("*.py") if p.name != "__init__.py")
SCRIPTS = [*HARNESS_FILES, BENCHMARKS / "run.py", BENCHMARKS / "gpu_memory_check.py"]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def test_there_are_harnesses_in_every_group():
    for group in GROUPS:
        assert [p for p in HARNESS_FILES if p.parent.name == group], group


@pytest.mark.parametrize("script", HARNESS_FILES, ids=lambda p: str(p.relative_to(BENCHMARKS)))
def test_harness_starts(script, monkeypatch, capsys):
    """As `python -m benchmarks.GROUP.NAME --help` runs it, in this process: the harnesses' heavy imports (torch,
    transformers, TRL) are paid once, not once a script (4-5 s each for 4 of them)."""
    if script.stem == "gpu_memory_cooper":
        pytest.skip("a module the GPU memory check imports, not a command")
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module(module_name(script), run_name="__main__", alter_sys=True)
    assert exited.value.code in (0, None)
    assert "usage" in capsys.readouterr().out.lower()


@pytest.mark.parametrize("command", [["benchmarks/run.py", "--help"], ["benchmarks/gpu_memory_check.py", "--help"]],
                         ids=["run", "gpu_memory_check"])
def test_the_commands_run_by_path_start_from_anywhere(command, tmp_path):
    """benchmarks/run.py and the GPU check's `python benchmarks/gpu_memory_check.py` run as files, not modules,
    from any folder (the GPU machine's checkout has no coreward installed: the forwarder gives src/ to its child)."""
    done = subprocess.run([sys.executable, str(REPO / command[0]), *command[1:]], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower()


def test_no_benchmark_imports_test_machinery_or_edits_sys_path():
    offenders = []
    for path in sorted(BENCHMARKS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                names = []
            if any(name == "tests" or name.startswith("tests.") for name in names):
                offenders.append((str(path.relative_to(REPO)), node.lineno, "imports tests"))
            if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                    and node.value.id == "sys"):
                offenders.append((str(path.relative_to(REPO)), node.lineno, "sys.path"))
    assert offenders == []


def test_run_py_runs_every_harness():
    listed = {(h.group, h.name) for h in run.HARNESSES}
    on_disk = {(p.parent.name, p.stem) for p in HARNESS_FILES if p.stem not in run.NOT_RUN}
    assert on_disk - listed == set(), "harnesses benchmarks/run.py does not run"
    assert listed - on_disk == set(), "harnesses benchmarks/run.py names that do not exist"
    assert set(run.NOT_RUN) <= {p.stem for p in HARNESS_FILES}


def test_run_py_lists_each_group_and_says_why_it_skips(capsys, tmp_path):
    assert run.main(["--list", "--group", "verification", "--out", str(tmp_path)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in listed] == [h.name for h in run.HARNESSES if h.group == "verification"]
    assert "skipped: no --peer-cases" in next(line for line in listed if "verify_peer_suites" in line)
    assert run.main(["--list", "--quick", "--only", "majority_classes"]) == 0
    assert "python -m benchmarks.verification.majority_classes --groups 16" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        run.main(["--only", "nope"])


def test_benchmarks_readme_indexes_every_harness():
    index = (BENCHMARKS / "README.md").read_text()
    listed = set(re.findall(r"\[`(\w+/\w+\.py)`\]\(", index))  # each harness's row links to it
    on_disk = {str(p.relative_to(BENCHMARKS)) for p in HARNESS_FILES}
    assert on_disk - listed == set(), "harnesses benchmarks/README.md does not describe"
    assert listed - on_disk == set(), "harnesses benchmarks/README.md names that do not exist"


def test_every_named_benchmark_exists():
    """A path `benchmarks/....py` or a module `benchmarks.GROUP.NAME` named in the tracked text files exists.
    Records are left as they were written: a study's folder (its script and README name the paths of the commit it
    runs at), the results a harness wrote, the results page's rows (each the command as it ran at its commit) and the
    pre-registration (written before its runs)."""
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], capture_output=True,
                             text=True, cwd=REPO, check=True).stdout.split()
    records = ("studies/", "benchmarks/results/gpu_check-", "benchmarks/results/memory_plan_accuracy-",
               "benchmarks/results/plan_vs_rss-", "benchmarks/results/peer_runs-", "docs/results.md",
               "docs/preregistration.md")
    texts = [p for p in tracked if p.endswith((".md", ".py", ".yaml", ".toml")) and (REPO / p).exists()
             and not p.startswith(records)]
    missing = set()
    for path in texts:
        text = (REPO / path).read_text()
        missing |= {(path, named) for named in re.findall(r"(?<![\w/.])benchmarks/[\w/]+\.py", text)
                    if not (REPO / named).exists()}
        missing |= {(path, named) for named in re.findall(r"(?<![\w/.])benchmarks\.[a-z_]+\.[a-z_0-9]+(?=[\s`:)\]'\"]|$)", text)
                    if not (REPO / (named.replace(".", "/") + ".py")).exists()}
    assert sorted(missing) == [], "files naming a benchmark that does not exist (file, name)"
