"""The cheap path: answers equal after LaTeX-cosmetic normalization, or plain arithmetic compared as exact
rationals. math-verify rounds floats (`\\frac{1}{2^{99}}` equals `\\frac{1}{2^{98}}` for it, and so do
`0.0000001` and `0.0000002`); exact arithmetic does not, and costs microseconds instead of milliseconds.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from coreward.verify.boxes import MAX_ANSWER_CHARS, THOUSANDS


NUMERIC_REL_TOL = Fraction(1, 10**9)  # for non-integers; integers must match exactly

_COSMETIC = re.compile(r"\s+|\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\\[!,;: ]|\\displaystyle")
_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![a-zA-Z])")
# Separators that only format a number: `32{,}349`, `32,\!349`, `1\,000`.
_NUMBER_FORMATTING = re.compile(r"\{,\}|\\!|(?<=\d)\\,(?=\d)|\\\$")


def canonical(answer: str) -> str:
    """The answer without what LaTeX renders identically or what only formats it: spaces,
    `\\left`/`\\right`, thin spaces, `{,}`, `\\$`, thousands separators, `\\%` spelled `%`, and
    `\\dfrac`/`\\tfrac` spelled `\\frac`.

    Thousands separators are read before spaces go: `32,349` is one number, `32, 349` a list of two."""
    text = _NUMBER_FORMATTING.sub(lambda m: "," if m.group(0) == "{,}" else "", answer.strip().strip("$").strip())
    if THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    return _FRAC_VARIANTS.sub(r"\\frac", _COSMETIC.sub("", text)).replace("\\%", "%")


def fast_decide(gold: str, pred: str) -> bool | None:
    """True/False when cheap rules settle it, None when math-verify must decide.

    Both plain arithmetic -> exact rational comparison: `\\frac{1}{2^{99}}` is not `\\frac{1}{2^{98}}`
    (math-verify says it is), and `0.0000001` is not `0.0000002` (math-verify rounds both to 0).
    """
    if len(gold) > MAX_ANSWER_CHARS or len(pred) > MAX_ANSWER_CHARS:
        return None
    gold_c, pred_c = canonical(gold), canonical(pred)
    if not gold_c or not pred_c:
        return False
    if gold_c == pred_c:
        return True
    gold_v = exact_value(gold_c)
    pred_v = None if gold_v is None else exact_value(pred_c)
    if pred_v is None:
        return None
    if gold_v.denominator == 1 and pred_v.denominator == 1:
        return gold_v == pred_v
    return abs(gold_v - pred_v) <= NUMERIC_REL_TOL * max(abs(gold_v), abs(pred_v))


def exact_value(answer: str) -> Fraction | None:
    """The exact value of a canonical answer made only of numbers, `+ - * / ^ !`, `\\cdot`, `\\times`,
    `\\div`, brackets and `\\frac{}{}`; None for anything else (variables, roots, implicit products,
    `2^10`, which LaTeX reads as 2^1 0) or when the result would be huge."""
    try:
        return _Arithmetic(answer).value()
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


class _Arithmetic:
    """Recursive-descent evaluator for `exact_value` (raises ValueError on anything it doesn't know)."""

    MAX_DEPTH = 20
    MAX_RESULT_BITS = 100_000
    _NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")
    _MUL_OPS = ("*", "/", "\\cdot", "\\times", "\\div")

    def __init__(self, text: str):
        self.text, self.pos, self.depth = text, 0, 0

    def value(self) -> Fraction:
        result = self._sum()
        if self.pos != len(self.text):
            raise ValueError("trailing input")
        return result

    def _peek_op(self, ops) -> str | None:
        return next((op for op in ops if self.text.startswith(op, self.pos)), None)

    def _sum(self) -> Fraction:
        total = self._product()
        while op := self._peek_op(("+", "-")):
            self.pos += 1
            total = self._bounded(total + self._product() if op == "+" else total - self._product())
        return total

    def _product(self) -> Fraction:
        result = self._signed()
        while op := self._peek_op(self._MUL_OPS):
            if op.startswith("\\") and self.text[self.pos + len(op) : self.pos + len(op) + 1].isalpha():
                raise ValueError("unknown command")
            self.pos += len(op)
            factor = self._signed()
            result = self._bounded(result * factor if op in ("*", "\\cdot", "\\times") else result / factor)
        return result

    def _signed(self) -> Fraction:
        if op := self._peek_op(("+", "-")):
            self.pos += 1
            return self._signed() if op == "+" else -self._signed()
        return self._power()

    def _power(self) -> Fraction:
        base = self._atom()
        if self._peek_op(("!",)):
            self.pos += 1
            if self._peek_op(("!",)):
                raise ValueError("double factorial")
            base = self._factorial(base)
        if not self._peek_op(("^",)):
            return base
        self.pos += 1
        if self._peek_op(("{",)):
            exponent = self._group("{", "}")
        elif self.pos < len(self.text) and self.text[self.pos].isdigit():
            exponent = Fraction(int(self.text[self.pos]))
            self.pos += 1
            if self.pos < len(self.text) and self.text[self.pos].isdigit():
                raise ValueError("ambiguous exponent")
        else:
            raise ValueError("bad exponent")
        return self._raise(base, exponent)

    def _raise(self, base: Fraction, exponent: Fraction) -> Fraction:
        if exponent.denominator != 1:
            raise ValueError("non-integer exponent")
        bits = max(base.numerator.bit_length(), base.denominator.bit_length(), 1)
        if bits * abs(exponent.numerator) > self.MAX_RESULT_BITS:
            raise ValueError("result too large")
        return base ** int(exponent)

    def _factorial(self, value: Fraction) -> Fraction:
        if value.denominator != 1 or value < 0:
            raise ValueError("factorial of a non-natural number")
        n = value.numerator
        if n * max(n.bit_length(), 1) > self.MAX_RESULT_BITS:  # log2(n!) < n log2(n)
            raise ValueError("result too large")
        return Fraction(math.factorial(n))

    def _bounded(self, value: Fraction) -> Fraction:
        """Keep every intermediate result small, so a long product can't take quadratic time."""
        if max(value.numerator.bit_length(), value.denominator.bit_length()) > self.MAX_RESULT_BITS:
            raise ValueError("result too large")
        return value

    def _atom(self) -> Fraction:
        if number := self._NUMBER.match(self.text, self.pos):
            self.pos = number.end()
            return Fraction(number.group(0))
        if self._peek_op(("\\frac",)):
            self.pos += len("\\frac")
            numerator = self._frac_argument()
            return numerator / self._frac_argument()
        for opening, closing in (("(", ")"), ("[", "]"), ("{", "}")):
            if self._peek_op((opening,)):
                return self._group(opening, closing)
        raise ValueError("unexpected token")

    def _frac_argument(self) -> Fraction:
        """`{...}`, or the single digit of the `\\frac34` shorthand."""
        if self.pos < len(self.text) and self.text[self.pos].isdigit():
            self.pos += 1
            return Fraction(int(self.text[self.pos - 1]))
        return self._group("{", "}")

    def _group(self, opening: str, closing: str) -> Fraction:
        if not self._peek_op((opening,)):
            raise ValueError(f"expected {opening}")
        self.depth += 1
        if self.depth > self.MAX_DEPTH:
            raise ValueError("too deep")
        self.pos += 1
        inner = self._sum()
        if not self._peek_op((closing,)):
            raise ValueError(f"expected {closing}")
        self.pos += 1
        self.depth -= 1
        return inner
