"""The command-line reference (docs/reference/cli.md), generated from the CLI itself so it cannot go stale.

Every `coreward` command and subcommand, its usage line, its help and each option's help, type and default, read
from the click command typer builds (`typer.main.get_command`), as `coreward COMMAND --help` prints them.

Two ways to run it:
    python docs/gen_cli_reference.py [OUTPUT.md]     # prints (or writes) the page
    mkdocs build                                      # mkdocs.yml names this file as a hook: `on_files`
                                                      # adds the page to the site at build time
"""

from __future__ import annotations

import sys


PAGE = "reference/cli.md"


def commands():
    """(path, click command, its context) of every command, depth first, in the order `--help` lists them."""
    import typer

    from coreward.cli import app

    root = typer.main.get_command(app)
    context = root.make_context("coreward", [], resilient_parsing=True)

    def walk(command, context, path):
        yield path, command, context
        for name in command.list_commands(context) if hasattr(command, "list_commands") else []:
            sub = command.get_command(context, name)
            if sub is None or sub.hidden:
                continue
            yield from walk(sub, sub.make_context(name, [], parent=context, resilient_parsing=True), f"{path} {name}")

    yield from walk(root, context, "coreward")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") if text else "—"


def help_paragraphs(text: str) -> list[str]:
    """A command's docstring as markdown: its paragraphs, its examples (`Example: coreward ...`) as a code block."""
    out = []
    for paragraph in text.replace("\b", "").strip().split("\n\n"):
        lines = [line.rstrip() for line in paragraph.strip("\n").splitlines()]
        if not lines:
            continue
        if lines[0].startswith("Example"):
            out += ["```text", *(line.strip() for line in lines), "```", ""]
        else:
            out += [" ".join(line.strip() for line in lines), ""]
    return out


def section(path: str, command, context) -> list[str]:
    depth = path.count(" ")
    out = [f"{'#' * min(depth + 1, 4)} `{path}`", ""]
    out += help_paragraphs(command.help or "")
    pieces = " ".join(command.collect_usage_pieces(context))
    out += ["```", f"{path} {pieces}".rstrip(), "```", ""]
    rows = []
    for param in command.params:
        record = param.get_help_record(context)
        if record is None:  # an argument: click gives it no help line; its name is in the usage line
            rows.append((f"`{param.human_readable_name}`", "argument" + (", required" if param.required else "")))
            continue
        declaration, text = record
        rows.append((f"`{declaration}`", text))
    if rows:
        out += ["| option | help |", "|---|---|"]
        out += [f"| {_cell(decl)} | {_cell(text)} |" for decl, text in rows]
        out.append("")
    return out


def render() -> str:
    out = ["# Command-line reference", "",
           "Generated from the command line itself by `docs/gen_cli_reference.py` at every docs build: each "
           "command, its usage and each option as `coreward COMMAND --help` prints them. A typo in an option is "
           "an error that names it (exit 2).", ""]
    for path, command, context in commands():
        if path == "coreward":
            out += ["## `coreward`", "", (command.help or "").strip(), ""]
            continue
        out += section(path, command, context)
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- mkdocs hook


def on_files(files, config):
    """mkdocs hook: add the generated page to the site."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files


if __name__ == "__main__":
    page = render()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            out.write(page)
    else:
        print(page, end="")
