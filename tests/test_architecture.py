"""The package's layers, read from the code itself: every import in `src/` (inside functions too).

    runtime < verify < llm < data < rm < rewards < evaluation < grpo < experiments < demo < cli

A module may import from its own package and from packages below it, never from one above; no two files
import each other, directly or around a loop; only the engine package (`grpo`) imports TRL; no library
module imports the tests' machinery.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest


SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = ["runtime", "verify", "llm", "data", "rm", "rewards", "evaluation", "grpo", "experiments", "demo", "cli"]
TOP = {"coreward", "coreward.cli"}  # the public API (`import coreward`) and the command line stand on everything


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement in the file, at any depth; `from a import b` counts `a.b`
    as well when `a.b` is a module (so `from coreward.rewards import cooper` is an import of that file)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def library_files() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def layer(module: str) -> int:
    if module in TOP:
        return len(LAYERS)
    package = module.split(".")[1]
    assert package in LAYERS, f"{module}: package {package!r} has no layer: add it to LAYERS and the README"
    return LAYERS.index(package)


def internal_graph() -> dict[str, set[str]]:
    files = library_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for _, target in imports_of(path):
            if target in files and target != name:
                graph[name].add(target)
    return graph


def test_every_package_has_a_layer():
    for module in library_files():
        layer(module)


def test_no_import_goes_up_a_layer():
    files = library_files()
    upward = []
    for name, path in files.items():
        for line, target in imports_of(path):
            if target.startswith("coreward.") and target in files and layer(target) > layer(name):
                upward.append(f"{path.relative_to(SRC)}:{line} imports {target}")
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_no_import_cycle_between_files():
    graph = internal_graph()
    # a package's __init__ re-exports its modules: an edge into an __init__ from its own package's files is
    # the usual "import the sibling through the package" and is followed like any other
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles between files:\n" + "\n".join(cycles)


def test_only_the_engine_imports_trl():
    outside = [
        f"{path.relative_to(SRC)}:{line} imports {target}"
        for name, path in library_files().items()
        if not name.startswith("coreward.grpo")
        for line, target in imports_of(path)
        if target == "trl" or target.startswith("trl.")
    ]
    assert not outside, "only coreward.grpo may import trl:\n" + "\n".join(outside)


def test_the_library_does_not_import_the_tests():
    offenders = [
        f"{path.relative_to(SRC)}:{line} imports {target}"
        for path in library_files().values()
        for line, target in imports_of(path)
        if target == "tests" or target.startswith("tests.")
    ]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("case, expected", [
    ("from coreward.grpo.trainer import X", ["coreward.grpo.trainer", "coreward.grpo.trainer.X"]),
    ("def f():\n    import trl.trainer\n", ["trl.trainer"]),
])
def test_imports_are_found_inside_functions_too(tmp_path, case, expected):
    path = tmp_path / "m.py"
    path.write_text(case)
    assert [name for _, name in imports_of(path)] == expected


METHOD_FILE_LINES = 220


def test_each_method_file_reads_as_a_page():
    """A file of rewards/ that registers a reward (`@register`) stays within a page: its method, top to bottom;
    plumbing and variants live in files beside it (e.g. cooper/variants.py, ensemble.py, teacher_weights.py)."""
    long = []
    for path in sorted((SRC / "coreward" / "rewards").rglob("*.py")):
        text = path.read_text()
        lines = len(text.splitlines())
        if re.search(r"^@register\(", text, re.MULTILINE) and lines > METHOD_FILE_LINES:
            long.append(f"{path.relative_to(SRC)}: {lines} lines")
    assert not long, f"method files over {METHOD_FILE_LINES} lines:\n" + "\n".join(long)
