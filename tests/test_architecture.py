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


# --------------------------------------------------------------------------- methods own their knowledge
ENGINE_PACKAGES = ("grpo", "evaluation", "experiments")
# Methods named by a word the engine uses for something else, and the files where it does (`*`: everywhere; a
# tuple: any of these). In
# these files the word may appear, but never as a method's metric namespace (`judge/calls`): that is the method's.
VOCABULARY = {
    "model": ("*", "the policy model, a config's `model` section"),
    "rule": ("evaluation/", "the rule verifier (coreward.verify) an evaluation grades with; the guard's alarm rule"),
    "judge": ("evaluation/", "the evaluator's LLM judge (`coreward eval --judge`, rm/judge.py)"),
    "majority": ("evaluation/", "maj@n's majority answer"),
    "entropy": (("grpo/token_stats.py", "grpo/micro_batches.py", "grpo/shared_prompts.py", "grpo/plan/activations.py"),
                "a statistic of the policy's logits any source may ask for (`needs_token_stats`); TRL's "
                "`top_entropy_quantile`, which masks tokens per micro-batch, and the per-token entropies its "
                "log-probability pass returns (`compute_entropy`)"),
    "self_certainty": ("grpo/token_stats.py", "a statistic of the policy's logits any source may ask for"),
}


def method_names() -> dict[str, type]:
    from coreward.rewards import builtin_methods

    return {cls.name: cls for cls in builtin_methods()}


def method_modules() -> set[str]:
    """Each method's own modules: the module that registers it, and its whole subpackage when it has one."""
    modules = set()
    for cls in method_names().values():
        module = cls.__module__
        package = module.rpartition(".")[0]
        modules.add(package if package != "coreward.rewards" else module)
    return modules


def code_words(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every identifier and string literal of the file's code (docstrings and comments are prose)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append((node.lineno, node.value))
        elif isinstance(node, ast.Name):
            words.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            words.append((node.lineno, node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.append((node.lineno, node.name))
        elif isinstance(node, (ast.keyword, ast.arg)) and node.arg:
            words.append((node.lineno, node.arg))
    return words


def names_a_method(text: str, name: str, where: str) -> bool:
    """Whether `text` names the method `name` (as a word: `cooper_steps`, `co_rewarding_2/teacher_distance`,
    `"cooper"`), in the file `where` (relative to coreward/)."""
    if re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}/", text):
        return True  # the method's metric namespace
    files, _ = VOCABULARY.get(name, ("", ""))
    if files == "*" or (files and where.startswith(files)):
        return False
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", text, re.IGNORECASE) is not None


def test_the_engine_names_no_reward_method():
    """grpo/, evaluation/ and experiments/ know no method: each source says what it needs through its hooks (memory,
    health watches, step cost, exported models, data needs), so a new method is its own files alone. The names come
    from the registry, so a new method is checked as soon as it registers."""
    names, modules = method_names(), method_modules()
    assert {"cooper", "co_rewarding_2"} <= set(names) and "coreward.rewards.cooper" in modules  # the registry is read
    found = []
    for package in ENGINE_PACKAGES:
        for path in sorted((SRC / "coreward" / package).rglob("*.py")):
            where = str(path.relative_to(SRC / "coreward"))
            for line, target in imports_of(path):
                if any(target == m or target.startswith(m + ".") for m in modules):
                    found.append(f"{where}:{line} imports {target}")
            for line, text in code_words(path):
                found += [f"{where}:{line} names {name!r}: {text[:80]!r}" for name in names
                          if names_a_method(text, name, where)]
    assert not found, "the engine names reward methods (give the source a hook instead):\n" + "\n".join(found)


@pytest.mark.parametrize("text, name, where, expected", [
    ("cooper_steps", "cooper", "grpo/health.py", True),
    ("co_rewarding_2/teacher_distance", "co_rewarding_2", "grpo/health.py", True),
    ("judge/calls", "judge", "evaluation/evaluate.py", True),
    ("judge_mode", "judge", "evaluation/evaluate.py", False),
    ("judge_mode", "judge", "grpo/health.py", True),
    ("unwrap_model", "model", "grpo/trainer.py", False),
    ("coopers", "cooper", "grpo/trainer.py", False),
])
def test_a_method_is_named_as_a_word(text, name, where, expected):
    assert names_a_method(text, name, where) is expected
