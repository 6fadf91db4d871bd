"""What an answer claims, as comparisons math-verify can decide one by one.

math-verify compares two expressions; an answer can claim more than one thing, and the hedges a policy
learns hide there. So before any comparison an answer is read as:

* a list of elements: several boxes (joined by extraction), top-level commas, `or`, `and`, `\\lor`, `\\vee`,
  `\\quad`, a line break `\\\\` outside a matrix, the rows of `cases`, top-level semicolons (`-12;-11`; a
  group of assignments between them is a tuple: `p=5,q=2;p=7,q=2` is `(5,2), (7,2)`). `a \\pm b` is the two
  elements `a + b`, `a - b` (so `\\pm 2021` equals `\\{-2021, 2021\\}`, and is wrong for gold `2021`). A list is a set: it is correct only
  when every element equals some gold element and every gold element is matched (so `3, 5` is wrong for
  gold `5`, and `(2, 2), (6, 2)` right for `(6, 2), (2, 2)`); `ordered_lists=True` compares by position.
* per element, a chain of `=` / `\\approx` between values (`5 = 3`, `x = 5 = 3`, `5 \\approx 3`): every value
  must equal the gold; a `\\approx` side to the digits it gives (`\\frac{\\sqrt3}{3} \\approx 0.577` is fine).
  A leading label (`x`, `f(x)`, `\\frac{NO}{BO}`) is not a value; one equation with variables
  (`2x + 3y = 6`) is left whole to math-verify.
* per element, a unit (`5 \\text{ kg}`, `12 hours`, `28 %`): two different units are never equal; a unit on
  one side only is ignored (`10\\%` equals `10`, as MATH's graders agree). Angles: `90^\\circ`, `90°`,
  `90 degrees` are one unit, radians (`\\text{ radians}`, `rad`) another; they are not converted, so
  `\\pi/2 \\text{ radians}` is wrong for `90^\\circ` (the reference's unit is the one asked for).
* a multiple-choice letter when the gold is one (`C. x = 42` is `C`).
* with `decimal_comma=True`, `1000,99` reads as 1000.99 (default False: `-2,1` is MATH's list of two
  answers, and `1,000` is a thousands separator either way).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coreward.verify.boxes import THOUSANDS


MAX_CHECKS = 64  # a list matched element by element costs |gold| x |pred| comparisons


@dataclass(frozen=True)
class Check:
    """One comparison for math-verify (or the fast path): gold first; `rounding` decimals for `\\approx`."""

    gold: str
    pred: str
    rounding: int | None = None


# A verdict still to be decided: a constant, a Check, or ("all" | "any", [formulas]).
Formula = bool | Check | tuple


def evaluate(formula: Formula, decided: dict[Check, bool]) -> bool:
    if isinstance(formula, bool):
        return formula
    if isinstance(formula, Check):
        return decided[formula]
    op, parts = formula
    results = (evaluate(part, decided) for part in parts)
    return all(results) if op == "all" else any(results)


def checks_of(formula: Formula) -> list[Check]:
    if isinstance(formula, bool):
        return []
    if isinstance(formula, Check):
        return [formula]
    return [check for part in formula[1] for check in checks_of(part)]


def plan(gold: str, pred: str, decimal_comma: bool = False, ordered_lists: bool = False) -> Formula:
    """The comparisons that decide whether `pred` equals `gold`, and how their verdicts combine."""
    gold, pred = _plain_number(gold), _plain_number(pred)
    if decimal_comma:
        gold, pred = _decimal_point(gold), _decimal_point(pred)
    gold_letter = _choice(gold, gold_side=True)
    if gold_letter is not None and (pred_letter := _choice(pred, gold_side=False)) is not None:
        return gold_letter == pred_letter
    golds, preds = elements(gold), elements(pred)
    if len(golds) == 1 and len(preds) == 1:
        return _match(gold, pred)
    if min(len(golds), len(preds)) == 1 and _bracketed(gold if len(golds) == 1 else pred):
        return Check(gold, pred)  # a tuple or interval against a bare list: math-verify's call
    if len(golds) * len(preds) > MAX_CHECKS:
        return Check(gold, pred)
    if ordered_lists:
        return len(golds) == len(preds) and ("all", [_match(g, p) for g, p in zip(golds, preds)])
    each_pred_found = [("any", [_match(g, p) for g in golds]) for p in preds]
    each_gold_found = [("any", [_match(g, p) for p in preds]) for g in golds]
    return ("all", each_pred_found + each_gold_found)


def _match(gold: str, pred: str) -> Formula:
    """One gold element against one predicted element: units, then the chain of values."""
    gold_value, gold_unit = split_unit(gold)
    pred_value, pred_unit = split_unit(pred)
    if gold_unit and pred_unit and gold_unit != pred_unit:
        return False
    if _relation_sides(gold_value)[0] > 1:  # an equation as the gold: math-verify compares equations
        return Check(gold_value, pred_value)
    sides = chain_values(pred_value)
    if sides is None:
        return Check(gold_value, pred_value)
    return ("all", [Check(gold_value, side, rounding) for side, rounding in sides])


# --------------------------------------------------------------------------------------------------
# Lists
# --------------------------------------------------------------------------------------------------

_TEXT_CONNECTIVE = re.compile(r"\\(?:text|textrm|mathrm|mbox)\s*\{[^{}]*?\b(?:or|and)\b[^{}]*?\}")
_WORD_CONNECTIVE = re.compile(r"(?<![\\a-zA-Z])(?:or|and)(?![a-zA-Z])")
_SEPARATOR_COMMANDS = re.compile(r"\\(?:lor|vee|qquad|quad)(?![a-zA-Z])")
_CASES = re.compile(r"\\(?:begin|end)\{cases\}")
_MATRIX = re.compile(r"\\begin\{(?:[pbvBV]?matrix|array|smallmatrix)\}")
_OPENERS, _CLOSERS = "([{", ")]}"


def elements(answer: str) -> list[str]:
    """The members of an answer read as a list (one member when it is not a list); a set written with
    braces (`\\{1, 2\\}`, `{1,2,3}`) is a list too."""
    text = _SPACING.sub(r"\1 ", answer.strip()).strip()
    for opening, closing in (("\\{", "\\}"), ("\\left\\{", "\\right\\}"), ("{", "}")):
        if text.startswith(opening) and text.endswith(closing) and _top_level_commas(text[len(opening):-len(closing)]):
            text = text[len(opening) : -len(closing)]
            break
    if THOUSANDS.fullmatch(text):
        return [text]
    if len(groups := _split_top_level(text, ";")) > 1:
        text = ", ".join(_as_tuple(group) for group in groups)
    text = _TEXT_CONNECTIVE.sub(",", text)
    text = _SEPARATOR_COMMANDS.sub(",", _WORD_CONNECTIVE.sub(",", text))
    if _CASES.search(text):
        text = _CASES.sub(" ", text).replace("&", " ")
    if not _MATRIX.search(text):
        text = text.replace("\\\\", ",")
    parts = [_balanced(part) for part in _split_top_level(text, ",")]
    parts = [expanded for part in parts if part for expanded in _plus_minus(part)]
    return parts or [answer]


# `\,` `\;` `\:` `\!` (thin spaces; not the second backslash of a line break `\\`)
_SPACING = re.compile(r"(?<!\\)((?:\\\\)*)\\[,;:!]")
_ASSIGNMENT = re.compile(r"\s*[A-Za-z](?:_\{?\w+\}?)?\s*=\s*(.+?)\s*")
_PLUS_MINUS = re.compile(r"\\(pm|mp)(?![a-zA-Z])")


def _as_tuple(group: str) -> str:
    """A `;`-separated group of assignments as a tuple (`p=5,q=2` -> `(5, 2)`); any other group unchanged."""
    parts = _split_top_level(group, ",")
    values = [_ASSIGNMENT.fullmatch(part) for part in parts]
    if len(parts) > 1 and all(values):
        return "(" + ", ".join(value.group(1) for value in values) + ")"
    return group.strip()


def _plus_minus(part: str) -> list[str]:
    """`a \\pm b` -> [`a + b`, `a - b`] for one top-level `\\pm` (or `\\mp`); anything else unchanged."""
    signs = [m for m in _PLUS_MINUS.finditer(part) if len(_split_top_level(part[: m.start()] + ",", ",")) == 2]
    if len(signs) != 1 or len(_PLUS_MINUS.findall(part)) != 1:
        return [part]
    sign = signs[0]
    before, after = part[: sign.start()].strip(), part[sign.end() :].strip()
    plus, minus = (f"{before} + {after}" if before else after), f"{before} - {after}".strip()
    return [plus, minus] if sign.group(1) == "pm" else [minus, plus]


def _top_level_commas(text: str) -> bool:
    return len(_split_top_level(text, ",")) > 1


def _split_top_level(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside brackets (`(1, 2), [3, 4)` has one top-level comma)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        char = text[i]
        if char == "\\" and text[i + 1 : i + 2] in ("{", "}"):
            depth += 1 if text[i + 1] == "{" else -1
            i += 2
            continue
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
        elif depth <= 0 and text.startswith(separator, i):
            parts.append(text[start:i])
            start = i + len(separator)
        i += 1
    parts.append(text[start:])
    return parts


def _balanced(part: str) -> str:
    """A list member without the unmatched bracket a connective left behind (`3 \\text{ (or } 5)`);
    a half-open interval `[0, 1)` is matched (one opener, one closer) and stays."""
    part = part.strip()
    balance = lambda text: sum(text.count(c) for c in "([") - sum(text.count(c) for c in ")]")  # noqa: E731
    while part and part[-1] in ")]" and balance(part) < 0:
        part = part[:-1].strip()
    while part and part[0] in "([" and balance(part) > 0:
        part = part[1:].strip()
    return part


def _bracketed(answer: str) -> bool:
    return answer.strip().startswith(("(", "[", "\\{", "\\left", "{"))


# --------------------------------------------------------------------------------------------------
# Chains of equalities and approximations
# --------------------------------------------------------------------------------------------------

_RELATION = re.compile(r"\\approx(?![a-zA-Z])|\\simeq(?![a-zA-Z])|≈|(?<![<>!\\:])=(?!=)")
_SUBSCRIPT = re.compile(r"_\{[^{}]*\}|_\w")
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_DECIMALS = re.compile(r"-?\d*\.(\d+)|-?\d+")


def _relation_sides(answer: str) -> tuple[int, list[tuple[str, str]]]:
    """(number of sides, [(side, relation before it)]) for top-level `=`/`\\approx`."""
    sides, depth, start, relation = [], 0, 0, ""
    i = 0
    while i < len(answer):
        char = answer[i]
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
        elif depth == 0 and (match := _RELATION.match(answer, i)):
            sides.append((answer[start:i].strip(), relation))
            relation, start = ("=" if match.group(0) == "=" else "approx"), match.end()
            i = match.end()
            continue
        i += 1
    sides.append((answer[start:].strip(), relation))
    return len(sides), sides


def chain_values(answer: str) -> list[tuple[str, int | None]] | None:
    """The values a chain of `=`/`\\approx` claims, each with its rounding (None: exact); None when the
    answer is not a chain (one side, `x = 5`, or one equation with variables: math-verify's to compare)."""
    count, sides = _relation_sides(answer)
    if count == 1:
        return None
    while sides and _is_label(sides[0][0]):
        sides = sides[1:]
    if len(sides) <= 1 or (count == 2 and any(_has_variable(side) for side, _ in sides)):
        return None
    return [(side, _rounding(side) if relation == "approx" else None) for side, relation in sides]


def _is_label(side: str) -> bool:
    """A name rather than a value: letters and no digits once subscripts and commands are gone."""
    bare = _COMMAND.sub("", _SUBSCRIPT.sub("", side))
    return bool(re.search(r"[a-zA-Z]", bare)) and not re.search(r"\d", bare)


def _has_variable(side: str) -> bool:
    return re.search(r"[a-zA-Z]", _COMMAND.sub("", side)) is not None


def _rounding(side: str) -> int | None:
    """Decimals an approximation gives (`0.577` -> 3); None when it is not a plain number."""
    match = _DECIMALS.fullmatch(side.strip())
    if match is None:
        return None
    return len(match.group(1)) if match.group(1) else 0


# --------------------------------------------------------------------------------------------------
# Units, choice letters, decimal commas
# --------------------------------------------------------------------------------------------------

_NUMERIC = r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:\s*/\s*\d+)?|[-+]?\\[dt]?frac\{[^{}]+\}\{[^{}]+\}"
_UNIT = re.compile(
    rf"(?P<value>{_NUMERIC})\s*(?:\\[,;! ]\s*)*"
    r"(?:(?P<percent>\\?%)|\\(?:text|textrm|mathrm|mbox)\s*\{\s*(?P<wrapped>[A-Za-z][A-Za-z. ]*?)\s*\}|"
    r"(?P<word>[A-Za-z]+(?:\s+[A-Za-z]+)?))(?P<power>\^\{?\d\}?|²|³)?"
)


_ONE_LETTER_UNITS = frozenset("mgshLKAVWJN")


# An angle's unit, in each way it is written: `90^\circ`, `90^{\circ}`, `90°`, `90\degree`, `90 degrees`,
# `\frac{\pi}{2} \text{ radians}`, `1.2 rad`. Degrees and radians are both units: they are never converted
# into each other (a reference in degrees asks for degrees), so `\pi/2 \text{ radians}` is not `90^\circ`.
_ANGLE = re.compile(
    r"(?P<value>.*?\S)\s*(?:\\[,;! ]\s*)*(?:"
    r"(?P<degrees>\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\degree|\\textdegree|"
    r"\\(?:text|textrm|mathrm|mbox)\s*\{\s*(?:°|degrees?|deg)\s*\}|(?<![A-Za-z\\])degrees?)|"
    r"(?P<radians>\\(?:text|textrm|mathrm|mbox)\s*\{\s*(?:radians?|rad)\s*\}|(?<![A-Za-z\\])(?:radians?|rad)))\s*",
    re.DOTALL)
# a value with its own angle marks or a function of an angle (`\sin 30^\circ`, `30^\circ + 45^\circ`) is not split
_NOT_ANGLE_VALUE = re.compile(r"\\circ|°|\\degree|\\(?:arc)?(?:sin|cos|tan|cot|sec|csc)h?(?![a-zA-Z])")


def split_unit(answer: str) -> tuple[str, str | None]:
    """(`5`, `kg`) for `5 \\text{ kg}`, (`28`, `%`) for `28 %`, (`90`, `°`) for `90^\\circ` and `90°`, (`\\pi/2`,
    `rad`) for `\\pi/2 \\text{ radians}`, (answer, None) when no unit follows a number."""
    angle = _ANGLE.fullmatch(answer.strip())
    if angle is not None and not _NOT_ANGLE_VALUE.search(angle.group("value")):
        return angle.group("value"), "°" if angle.group("degrees") else "rad"
    match = _UNIT.fullmatch(answer.strip())
    if match is None:
        return answer, None
    if match.group("percent"):
        return match.group("value"), "%"
    word = match.group("word")
    if word is not None and len(word) == 1 and word not in _ONE_LETTER_UNITS:
        return answer, None  # `\\frac{3}{4}i`, `2x`, `5e`: a variable or a constant, not a unit
    unit = (match.group("wrapped") or word).lower().replace(" ", "").rstrip(".")
    if unit in ("percent", "percentage", "pct"):
        return match.group("value"), "%"
    if len(unit) > 2 and unit.endswith("s"):
        unit = unit[:-1]  # hours -> hour
    return match.group("value"), unit + (match.group("power") or "")


_WRAPPER = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{(.*)\}$")
_GOLD_CHOICE = re.compile(r"\(?([A-J])\)?")
_PRED_CHOICE = re.compile(r"\(([A-J])\).*|([A-J])(?:[.:)](?:\s.*)?)?", re.DOTALL)


def _choice(answer: str, gold_side: bool) -> str | None:
    """The choice letter of `C`, `(C)`, `\\text{(C)}`; on the prediction side also of `C. x = 42`."""
    text = answer.strip()
    while (match := _WRAPPER.match(text)) is not None:
        text = match.group(1).strip()
    match = (_GOLD_CHOICE if gold_side else _PRED_CHOICE).fullmatch(text)
    if match is None:
        return None
    return next(group for group in match.groups() if group)


_LATEX_THOUSANDS = re.compile(r"\{,\}|,\\!\s*")


def _plain_number(answer: str) -> str:
    """`32{,}349` and `32,\\! 349` (LaTeX thousands separators) -> `32349`; anything else unchanged."""
    text = _LATEX_THOUSANDS.sub(",", answer.strip())
    return text.replace(",", "") if THOUSANDS.fullmatch(text) else answer


_DECIMAL_COMMA = re.compile(r"-?\d+,\d+")


def _decimal_point(answer: str) -> str:
    """`1000,99` -> `1000.99` and `0,111` -> `0.111`; `1,000` stays a thousands separator."""
    text = answer.strip()
    if _DECIMAL_COMMA.fullmatch(text) and (not THOUSANDS.fullmatch(text) or text.lstrip("-").startswith("0,")):
        return text.replace(",", ".")
    return answer
