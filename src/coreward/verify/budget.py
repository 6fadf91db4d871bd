"""What may go to math-verify, and what may run in the calling process.

math-verify (ANTLR in pure Python, then sympy) spends seconds to hours on some shapes: deep bracket
nesting, exponent towers, hundreds of terms, huge powers or factorials. Those are refused before any
call, by their shape alone, so the verdict is the same on an idle machine and on a loaded one; real
answers never look like that (studies/2026-11-22-verifier-throughput/ has the timings).
"""

from __future__ import annotations

import re

from coreward.verify.boxes import MAX_ANSWER_CHARS, unescaped_braces


# Real golds (MATH, MATH-500, OlympiadBench, AIME, AMC) have bracket depth <= 3, no exponent towers,
# <= 47 operators.
MAX_BRACKET_DEPTH = 6
MAX_OPERATORS = 64
MAX_BIG_LITERAL_DIGITS = 6  # `3^{1234567}` and `1234567!` take seconds in sympy

_OPERATOR = re.compile(r"[-+*/=,;<>]|\\cdot|\\times|\\div|\\pm")
_BIG = MAX_BIG_LITERAL_DIGITS + 1
_BIG_LITERAL = re.compile(rf"\^\{{?\s*\d{{{_BIG},}}|\d{{{_BIG},}}\s*\)?\s*!")  # in an exponent or before `!`
_SIMPLE = re.compile(r"[0-9a-zA-Z+\-*/.,=\\{}^_ ]{1,40}")


def over_budget(answer: str) -> bool:
    """Would math-verify likely spend seconds on this? Deep nesting, exponent towers, hundreds of terms
    and huge exponents/factorials do (see docs/reference/verifier.md); real answers never look like that."""
    return (
        len(answer) > MAX_ANSWER_CHARS
        or _bracket_depth(answer) > MAX_BRACKET_DEPTH
        or _has_exponent_tower(answer)
        or len(_OPERATOR.findall(answer)) > MAX_OPERATORS
        or _BIG_LITERAL.search(answer) is not None
    )


def reference_problem(answer: object) -> str | None:
    """Why a reference answer can't be verified against (None: it can). Checked on training data before
    any model loads: such a reference would silently score every completion 0."""
    if answer is None or not str(answer).strip():
        return "is empty"
    text = str(answer)
    if not _braces_balanced(text):
        return "has unbalanced braces (LaTeX that does not parse)"
    if over_budget(text):
        return "is beyond the verifier's budget (too long, too deeply nested or a huge power)"
    return None


def _braces_balanced(text: str) -> bool:
    """`{` and `}` pair up (escaped `\\{`, `\\}` are literal braces and don't count)."""
    depth = 0
    for _, char in unescaped_braces(text):
        depth += 1 if char == "{" else -1
        if depth < 0:
            return False
    return depth == 0


def is_simple(answer: str) -> bool:
    """Short, no brackets but braces, shallow: safe to parse in the caller without a deadline."""
    return _SIMPLE.fullmatch(answer) is not None and answer.count("^") <= 2 and _bracket_depth(answer) <= 2


def _bracket_depth(answer: str) -> int:
    depth = deepest = 0
    for char in answer:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    return deepest


def _has_exponent_tower(answer: str) -> bool:
    """A `^` inside the exponent of another `^` (`10^{10^{10}}`, `2^{2^2}`), or `a^b^c`."""
    exponent_depths: list[int] = []  # brace depth at which each open exponent group started
    depth = 0
    for i, char in enumerate(answer):
        if char == "^":
            if exponent_depths or answer[i + 2 : i + 3] == "^":
                return True
            if answer[i + 1 : i + 2] == "{":
                exponent_depths.append(depth)
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if exponent_depths and depth == exponent_depths[-1]:
                exponent_depths.pop()
    return False
