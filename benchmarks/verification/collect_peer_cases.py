"""Collect other graders' own labelled test cases into jsonl files for `verify_peer_suites.py`.

    python -m benchmarks.verification.collect_peer_cases OUT_DIR [--math-verify PATH] [--nemo-skills PATH]
                                                    [--hendrycks PATH] [--open-instruct PATH]

Each PATH is a checkout of the repository (or the test file itself):

* `--math-verify`   huggingface/Math-Verify: every `tests/test_*.py`; a case is one row of a
  `@pytest.mark.parametrize` table with `gold`, `pred` and `expected`/`result`; the category is the test
  function's name without `test_` (so `test_yujianll.py`'s `test_string_extraction` is `string_extraction`).
  Rows that set `allow_set_relation_comp=True` or `strict=False` test a non-default option and are left
  out (math-verify alone is run with its defaults); a `precision` column is kept (a tolerance, not a
  convention). Rows whose values are not Python literals (an f-string computed at import) are skipped.
* `--nemo-skills`   NVIDIA/NeMo-Skills `tests/test_math_equal.py`: `test_correct_examples` (expected true) and
  `test_incorrect_examples` (false); each pair both ways, numbers written with `str()`; a None gold is
  skipped, a None pred is an empty completion; pairs that are not literals (`5 / 2`) are skipped.
* `--hendrycks`     hendrycks/math `modeling/math_equivalence_test.py`: gold `test_in`, pred `test_out`,
  expected from `assertTrue`/`assertFalse`; category the method name without `test_` and a trailing digit.
* `--open-instruct` allenai/open-instruct `open_instruct/test_math_utils.py`: each (input, normalized)
  pair of `test_latex_normalization` is an equivalence: gold the normalized string, pred the input.

The output directory gets one `<suite>.jsonl` per suite, one `{"suite", "category", "gold", "pred",
"expected"}` per line, and `"options"` where the case tests a convention coreward makes an option (a
`Verifier` keyword): `{"decimal_comma": true}` for math-verify's `number_extraction` cases that write a
decimal comma (`1000,99`, `0,111`, `2,74`; a comma before exactly three digits is a thousands separator),
`{"ordered_lists": true}` for every Hendrycks case (its grader compares lists position by position, and its
tests `order`/`decimals` say so). `verify_peer_suites.py` reports those verdicts in a column of their own. The cases are other projects' data: write them outside this repository.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import warnings
from pathlib import Path


DECIMAL_COMMA = re.compile(r"(?<![\d,])(?:0,\d+|\d+,(?:\d{1,2}|\d{4,}))(?![\d,])")
NON_DEFAULT_OPTIONS = {"allow_set_relation_comp": False, "strict": True}  # math-verify's defaults


def _literal(node: ast.AST):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "\$" in a test file: an invalid escape, kept as written
        return ast.literal_eval(node)


def _parametrize_tables(tree: ast.Module):
    """(function name, [argument names], [row nodes]) for each `@pytest.mark.parametrize` /
    `@parameterized.expand` of a module."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if not isinstance(decorator, ast.Call):
                continue
            name = ast.unparse(decorator.func)
            if name.endswith("parametrize") and len(decorator.args) >= 2:
                names = [n.strip() for n in _literal(decorator.args[0]).split(",") if n.strip()] \
                    if isinstance(_literal(decorator.args[0]), str) else list(_literal(decorator.args[0]))
                rows = decorator.args[1]
            elif name.endswith("expand") and decorator.args:
                names = [a.arg for a in node.args.args if a.arg != "self"]
                rows = decorator.args[0]
            else:
                continue
            if isinstance(rows, (ast.List, ast.Tuple)):
                yield node.name, names, list(rows.elts)


def _rows(path: Path):
    """(function name, {argument: value}) per literal row of every parametrized test in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for function, names, rows in _parametrize_tables(tree):
        for row in rows:
            try:
                value = _literal(row)
            except (ValueError, SyntaxError, TypeError):
                continue  # not a literal: computed at import time
            values = value if isinstance(value, tuple) and len(names) > 1 else (value,)
            if len(values) == len(names):
                yield function, dict(zip(names, values))


def _files(path: Path, relative: str) -> list[Path]:
    if path.is_file():
        return [path]
    target = path / relative
    return sorted(target.glob("test_*.py")) if target.is_dir() else [target]


def _case(suite: str, category: str, gold, pred, expected: bool) -> dict:
    return {"suite": suite, "category": category, "gold": gold, "pred": pred, "expected": bool(expected)}


def math_verify_cases(path: Path) -> list[dict]:
    cases = []
    for file in _files(path, "tests"):
        for function, row in _rows(file):
            expected = row.get("expected", row.get("result"))
            if "gold" not in row or "pred" not in row or not isinstance(expected, (bool, int)):
                continue  # e.g. test_string_extraction.py: parse() output, no gold
            if any(row.get(option, default) != default for option, default in NON_DEFAULT_OPTIONS.items()):
                continue
            case = _case("math-verify", function.removeprefix("test_"), row["gold"], row["pred"], expected)
            if case["category"] == "number_extraction" and any(
                    DECIMAL_COMMA.search(str(text)) for text in (row["gold"], row["pred"])):
                case["options"] = {"decimal_comma": True}
            cases.append(case)
    return cases


def nemo_skills_cases(path: Path) -> list[dict]:
    cases = []
    for file in _files(path, "tests/test_math_equal.py"):
        for function, row in _rows(file):
            pair = row.get("output_pair")
            if not isinstance(pair, tuple) or len(pair) != 2:
                continue
            expected = function == "test_correct_examples"
            for gold, pred in (pair, pair[::-1]):
                if gold is None:
                    continue
                cases.append(_case("nemo-skills", function.removeprefix("test_"), str(gold),
                                   None if pred is None else str(pred), expected))
    return cases


def hendrycks_cases(path: Path) -> list[dict]:
    cases = []
    for file in _files(path, "modeling/math_equivalence_test.py"):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            values, expected = {}, None
            for statement in ast.walk(node):
                if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
                    try:
                        values[statement.targets[0].id] = _literal(statement.value)
                    except (ValueError, SyntaxError):
                        pass
                elif isinstance(statement, ast.Call) and isinstance(statement.func, ast.Attribute):
                    if statement.func.attr in ("assertTrue", "assertFalse"):
                        expected = statement.func.attr == "assertTrue"
            if expected is not None and "test_in" in values and "test_out" in values:
                category = re.sub(r"\d+$", "", node.name.removeprefix("test_"))
                case = _case("hendrycks", category, values["test_in"], values["test_out"], expected)
                cases.append({**case, "options": {"ordered_lists": True}})
    return cases


def open_instruct_cases(path: Path) -> list[dict]:
    cases = []
    for file in _files(path, "open_instruct/test_math_utils.py"):
        for function, row in _rows(file):
            if set(row) == {"input_string", "expected_output"}:
                cases.append(_case("open-instruct", function.removeprefix("test_"), row["expected_output"],
                                   row["input_string"], True))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="directory for the jsonl files (outside this repository)")
    parser.add_argument("--math-verify", type=Path, help="huggingface/Math-Verify checkout (or a test file)")
    parser.add_argument("--nemo-skills", type=Path, help="NVIDIA/NeMo-Skills checkout (or test_math_equal.py)")
    parser.add_argument("--hendrycks", type=Path, help="hendrycks/math checkout (or math_equivalence_test.py)")
    parser.add_argument("--open-instruct", type=Path, help="allenai/open-instruct checkout (or test_math_utils.py)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for suite, path, collect in (("math-verify", args.math_verify, math_verify_cases),
                                 ("nemo-skills", args.nemo_skills, nemo_skills_cases),
                                 ("hendrycks", args.hendrycks, hendrycks_cases),
                                 ("open-instruct", args.open_instruct, open_instruct_cases)):
        if path is None:
            continue
        cases = collect(path)
        with open(args.out / f"{suite}.jsonl", "w", encoding="utf-8") as out:
            for case in cases:
                out.write(json.dumps(case, ensure_ascii=False) + "\n")
        print(f"{suite}: {len(cases)} cases -> {args.out / f'{suite}.jsonl'}")


if __name__ == "__main__":
    main()
