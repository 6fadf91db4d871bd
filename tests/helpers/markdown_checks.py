"""What tests/test_readme.py and tests/test_docs.py check in markdown: the `coreward ...` commands of its bash
blocks, the repository files it names, its local links, and wording that narrates instead of dating a figure."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner


REPO = Path(__file__).resolve().parents[2]

# a figure carries its date, machine, commit and command; these phrases tell the story of how it was obtained
NARRATION = re.compile(r"this session|earlier session|an earlier run|re-measured|re-run this", re.IGNORECASE)

# files of other repositories that pages cite by their path there
FOREIGN = {"tests/test_math_equal.py"}  # NVIDIA/NeMo-Skills' test pairs (docs/verification.md)


def commands(text: str) -> list[str]:
    """The arguments of every `coreward ...` (or `-m coreward.cli ...`) line of the bash blocks."""
    found = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            match = re.search(r"(?:^|\s)(?:coreward|-m coreward\.cli)\s+(.*)$", line)
            if match and not line.startswith("#"):
                found.append(match.group(1).split(" && ")[0])
    return found


def parse_command(command: str) -> tuple[int, str]:
    """Exit code and output of the CLI parsing `command` with `--help` appended (nothing runs)."""
    from coreward.cli import app

    args = [a for a in shlex.split(command) if a not in ("|", "&&")]
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def named_files(text: str) -> set[str]:
    """Repository files named in backquotes (`configs/demo/rule.yaml`)."""
    return set(re.findall(r"`((?:configs|benchmarks|docs|tests|src)/[\w./-]+\.(?:py|yaml|json|md|png))`", text)) - FOREIGN


def local_links(text: str) -> list[tuple[str, str]]:
    """(path, anchor) of every markdown link that is not a URL."""
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    out = []
    for link in links:
        if re.match(r"[a-z]+://|mailto:", link):
            continue
        path, _, anchor = link.partition("#")
        out.append((path, anchor))
    return out


def anchors(markdown_file: Path) -> set[str]:
    """The ids MkDocs gives the headings of a page (Python-Markdown's toc slugify)."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"```.*?```", "", markdown_file.read_text(), flags=re.S)
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M)}
