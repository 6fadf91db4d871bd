"""Finding `\\boxed{...}` answers and thousands separators: the one copy every coreward package uses.

Everything here is linear in the input: a completion is untrusted and may be megabytes of braces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass


MAX_ANSWER_CHARS = 1_000
BOX_COMMANDS = ("\\boxed", "\\fbox")
_BOX = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
# A plain number written with thousands separators and no space after them: `1,234`, `-12,345.5`.
# `32, 349` is not one (that is a list of two numbers, as MATH writes them).
THOUSANDS = re.compile(r"-?(?!0,)\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # `0,111` is no thousands group


@dataclass(frozen=True)
class Box:
    start: int  # where `\boxed` starts
    end: int  # one past the closing `}` (or the token of `\boxed 5`)
    content: str | None  # None: unclosed or longer than MAX_ANSWER_CHARS


def unescaped_braces(text: str, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, str]]:
    """(index, char) of each `{` and `}` in `text[start:stop]`; a backslash escapes the next character,
    so `\\{` and `\\}` are literal braces and are skipped."""
    stop = len(text) if stop is None else min(stop, len(text))
    for match in _BRACE_OR_ESCAPE.finditer(text, start, stop):  # the scan runs in C: a 100,000-char tail is cheap
        char = match.group(0)
        if char in "{}":
            yield match.start(), char


_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)


def boxes(text: str) -> list[Box]:
    """The outermost boxes of `text`, in order (a box inside another box is part of it).

    One pass pairs every brace (a stack), so a million unclosed `\\boxed{` cost one scan, not a million."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for i, char in unescaped_braces(text):
        if char == "{":
            stack.append(i)
        elif stack:
            closing[stack.pop()] = i
    found: list[Box] = []
    for match in _BOX.finditer(text):
        if found and match.start() < found[-1].end:
            continue  # nested in the previous box
        found.append(_box_at(text, match.start(), match.end(), closing))
    return found


def _box_at(text: str, start: int, after: int, closing: dict[int, int]) -> Box:
    i = after
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "{":
        close = closing.get(i)
        if close is None or close - i - 1 > MAX_ANSWER_CHARS:
            return Box(start, after, None)
        return Box(start, close + 1, text[i + 1 : close])
    if i > after:  # `\boxed 5`: one token after the space
        end = i
        while end < len(text) and not text[end].isspace() and text[end] != "$":
            end += 1
        return Box(start, end, text[i:end])
    return Box(start, after, None)


def unbox(answer: str) -> str:
    """`\\boxed{\\boxed{3}}`'s content `\\boxed{3}` -> `3`: a box that is the whole answer is unwrapped
    (as often as it is nested); anything else unchanged."""
    while answer.startswith(BOX_COMMANDS):
        found = boxes(answer)
        if len(found) != 1 or found[0].content is None or found[0].end != len(answer):
            break
        answer = found[0].content.strip()
    return answer


def last_boxed(text: str) -> str | None:
    """Content of the last complete box of `text` (None: no box, or the last one is unclosed)."""
    found = boxes(text)
    return found[-1].content if found else None


def drop_thousands_separators(text: str) -> str:
    """`1,234,567` -> `1234567` when the whole text is such a number; anything else unchanged."""
    return text.replace(",", "") if THOUSANDS.fullmatch(text) else text
