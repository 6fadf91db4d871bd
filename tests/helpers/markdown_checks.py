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
FOREIGN = {"tests/test_math_equal.py"}  # NVIDIA/NeMo-Skills' test pairs (docs/reference/verifier.md)


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
    """Exit code and output of the CLI parsing `command` (nothing runs): with `--help` appended (the command and its
    options exist), then as it stands, so that a missing required option or a bad value is exit 2 with click's
    message, as the user would get it."""
    from coreward.cli import app

    args = [a for a in shlex.split(command) if a not in ("|", "&&")]
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    if result.exit_code != 0:
        return result.exit_code, result.output
    problem = usage_error(args)
    return (2, f"{problem}\n{result.output}") if problem else (0, result.output)


def usage_error(args: list[str]) -> str | None:
    """click's usage error for `coreward ARGS` (a missing required option, a bad value), or None: each command's
    context is made from the arguments, as click does before it calls the command, and the command is not called."""
    import typer

    from coreward.cli import app

    command = typer.main.get_command(app)
    try:
        context = command.make_context("coreward", list(args))
        while hasattr(command, "resolve_command"):  # a group: on to the subcommand the arguments name
            name, command, rest = command.resolve_command(context, [*context._protected_args, *context.args])
            context = command.make_context(name, rest, parent=context)
    except Exception as err:  # typer vendors click: its UsageError is not importable from click
        if hasattr(err, "format_message"):
            return err.format_message()
        raise
    return None


def command_list(text: str) -> list[str]:
    """The lines of a page's command list: a plain code block (no language) of at least 5 `coreward ...` lines."""
    blocks, current, plain = [], None, False
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:  # a block opens: plain when its fence names no language
                current, plain = [], line.strip() == "```"
            else:
                if plain:
                    blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    lists = []
    for block in blocks:
        lines = []
        for line in block:
            if line.startswith("coreward "):
                lines.append(line)
            elif line[:1].isspace() and lines:  # an indented line goes on with the command above it
                lines[-1] += " " + line.strip()
        lists.append(lines)
    return next((lines for lines in lists if len(lines) >= 5), [])


def check_command_list(lines: list[str]) -> list[str]:
    """What a command list gets wrong about the CLI: a command it leaves out, a command or an option that does not
    exist (an option counts when the command or one of its subcommands has it)."""
    import typer

    from coreward.cli import app

    root = typer.main.get_command(app)
    context = root.make_context("coreward", [], resilient_parsing=True)
    commands = root.list_commands(context)

    def options_of(command) -> set[str]:
        names = {opt for param in command.params for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
                 if opt.startswith("--")}  # secondary: a flag's --no-x
        for sub in getattr(command, "commands", {}).values():
            names |= options_of(sub)
        return names

    problems, listed = [], set()
    for line in lines:
        name = line.split()[1]
        listed.add(name)
        if name not in commands:
            problems.append(f"{line}: no command {name!r}")
            continue
        unknown = sorted(set(re.findall(r"(?<![\w-])--[a-z][\w-]*", line)) - options_of(root.get_command(context, name)))
        problems += [f"{line}: coreward {name} has no option {opt}" for opt in unknown]
    problems += [f"the command list leaves out coreward {name}" for name in commands if name not in listed]
    return problems


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
    """The ids a page's links can reach: MkDocs' ids of its headings (Python-Markdown's toc slugify), and the ids it
    sets itself (`<a id="x"></a>`, attr_list's `{#x}`)."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"```.*?```", "", markdown_file.read_text(), flags=re.S)
    ids = set(re.findall(r"""<a\s+(?:name|id)=["']([\w-]+)["']""", text)) | set(re.findall(r"\{#([\w-]+)\}", text))
    headings = [re.sub(r"\s*\{#[\w-]+\}$", "", h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M)]
    return ids | {slugify(re.sub(r"[`*]", "", h), "-") for h in headings}
