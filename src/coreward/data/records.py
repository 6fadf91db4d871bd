"""`Record`, one math problem with its reference answer, and the field cleaning every source goes through.

Whatever a problem came from (a benchmark file, the hub, a user's file), its answer is normalised here, so
the verifier sees the same text either way.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any

from coreward.verify import drop_thousands_separators


@dataclass
class Record:
    """One math problem with its reference answer, whatever benchmark or file it came from."""

    id: str
    question: str
    answer: str
    source: str
    split: str
    solution: str | None = None
    level: str | None = None
    subject: str | None = None
    # the prompt as chat messages, when the data gives it so (the question is then its last user message)
    messages: list[dict[str, str]] | None = None
    # the data's own row, every column under its own name, as it was read from a user's file, directory or hub
    # dataset (None for a registered benchmark): TRL-style reward functions receive these columns too
    user_columns: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The record's own fields (not `user_columns`): what `coreward data show` prints and a records file holds.
        Every field is text but `messages`, copied so the dict shares nothing mutable with the record (a deep copy
        of every field was a large share of the demo's data build: docs/figures.md)."""
        values = {name: getattr(self, name) for name in _OWN_FIELDS}
        if values["messages"] is not None:
            values["messages"] = copy.deepcopy(values["messages"])
        return values


_OWN_FIELDS = tuple(f.name for f in fields(Record) if f.name != "user_columns")


class MissingField(Exception):
    """Raised by a row mapper; the loader turns it into a CorewardError naming file and row."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class BadField(Exception):
    """A field that is present but unusable (wrong type, empty); reported like `MissingField`."""

    def __init__(self, name: str, why: str):
        super().__init__(f"{name} {why}")
        self.name = name
        self.why = why


_TRAILING_ZEROS = re.compile(r"(-?\d+)\.0+")


_LEADING_ZEROS = re.compile(r"(-?)0+(\d+)")


def clean_number(value: Any) -> str:
    """Render a numeric answer the way a person writes it: 27.0 -> "27", "1,080" -> "1080", "025" -> "25".

    Applied only to benchmarks whose answers are single numbers (GSM8K, SVAMP, AIME, AMC): in the
    others "1,9" is a list of two answers, not a thousands separator.
    """
    if isinstance(value, bool):
        raise TypeError("a boolean is not a numeric answer")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    text = drop_thousands_separators(text)
    if match := _TRAILING_ZEROS.fullmatch(text):
        text = match.group(1)
    if match := _LEADING_ZEROS.fullmatch(text):
        text = match.group(1) + match.group(2)
    return "0" if text == "-0" else text


_NOINDENT_TAIL = re.compile(r"(\\\\)?\s*\\noindent\s*$")


_LINE_BREAK_TAIL = re.compile(r"\\\\\s*$")


_DOLLAR = re.compile(r"\\?\$")


def clean_latex_answer(text: str) -> str:
    """Strip the LaTeX residue that hand-typed answers carry, keeping the math itself.

    Removes MathOdyssey's trailing `\\\\ \\noindent`, `$...$` delimiters (and `\\$` currency signs),
    newlines, and a sentence-final period ("$3$." -> "3"): math-verify parses the rest.
    """
    text = _NOINDENT_TAIL.sub("", text)
    text = _LINE_BREAK_TAIL.sub("", text)
    text = _DOLLAR.sub("", text)
    text = " ".join(text.split())
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1].rstrip()
    return text


def answer_text(value: Any, name: str = "answer") -> str:
    """Turn an answer of any JSON type into a string: numbers cleaned, lists joined by ", ".

    Raises `BadField` for what can't be an answer: an object, a boolean, NaN or infinity.
    """
    if isinstance(value, (list, tuple)):
        return ", ".join(answer_text(item, name) for item in value)
    if isinstance(value, bool) or isinstance(value, dict):
        raise BadField(name, f"must be text, a number or a list of them, got {type(value).__name__} {value!r:.40}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadField(name, f"is not a finite number ({value})")
    if isinstance(value, (int, float)):
        return clean_number(value)
    return str(value).strip()


def text_field(row: dict, name: str) -> str:
    """A required text field: a string (numbers are not questions), not empty."""
    value = field_of(row, name)
    if not isinstance(value, str):
        raise BadField(name, f"must be text, got {type(value).__name__} {value!r:.40}")
    if not value.strip():
        raise BadField(name, "is empty")
    return value.strip()


_CALC = re.compile(r"<<[^<>]*>>")


def gsm8k_answer(solution: str) -> str:
    """GSM8K solutions end in `#### <number>`; the number is the reference answer."""
    if "####" not in solution:
        raise MissingField("answer (no '#### ' final answer)")
    return clean_number(solution.rsplit("####", 1)[1])


def strip_calc(solution: str) -> str:
    """Drop GSM8K's `<<48/2=24>>` calculator annotations, which are not part of the written solution."""
    return _CALC.sub("", solution)


def field_of(row: dict, *names: str) -> Any:
    """The first of `names` present (and not None) in `row`: hub and local copies spell fields differently."""
    for name in names:
        if row.get(name) is not None:
            return row[name]
    raise MissingField(" or ".join(names))


def question_of(row: dict, name: str) -> tuple[str, list[dict[str, str]] | None]:
    """The question column: text, or chat messages (`[{"role": ..., "content": ...}]`), whose last user
    message is then the question text (rephrasing, reward models and reports read that)."""
    value = field_of(row, name)
    if isinstance(value, str):
        if not value.strip():
            raise BadField(name, "is empty")
        return value.strip(), None
    if isinstance(value, (list, tuple)) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    ):
        users = [m["content"] for m in value if m["role"] == "user"]
        if not users or not users[-1].strip():
            raise BadField(name, "has no user message with text")
        return users[-1].strip(), [{"role": m["role"], "content": m["content"]} for m in value]
    raise BadField(name, f"must be text or a list of chat messages (role, content), got {type(value).__name__} {value!r:.40}")


def with_question(record: Record, question: str) -> Record:
    """The record with another question (a rephrasing): in chat messages, the last user message is replaced."""
    from dataclasses import replace

    messages = record.messages
    if messages is not None:
        last = max(i for i, m in enumerate(messages) if m["role"] == "user")
        messages = [dict(m, content=question) if i == last else m for i, m in enumerate(messages)]
    return replace(record, question=question, messages=messages)
