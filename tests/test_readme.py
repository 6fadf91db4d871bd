"""The README's commands still run: every `coreward ...` line of its bash blocks names a real command with
real options (parsed by the CLI itself, `--help` appended so nothing trains), and every file it names exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreward.cli import app

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def readme_commands() -> list[str]:
    commands = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            found = re.search(r"(?:^|\s)(?:coreward|-m coreward\.cli)\s+(.*)$", line)
            if found and not line.startswith("#"):
                commands.append(found.group(1))
    return commands


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_parses(command):
    args = [a for a in shlex.split(command) if a not in ("|", "&&")]
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, f"coreward {command}\n{result.output}"


def test_readme_names_files_that_exist():
    named = set(re.findall(r"`((?:configs|benchmarks|docs|tests|src)/[\w./-]+\.(?:py|yaml|json|md|png))`", README))
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, missing
    assert len(readme_commands()) >= 4
