"""Final-answer extraction from untrusted model completions.

A completion is whatever the policy sampled: it may be megabytes long, contain NUL bytes or lone
surrogates, or be crafted LaTeX. So every step here is linear in the input, the regex fallbacks only
look at the last `TAIL_CHARS` characters, an answer longer than `MAX_ANSWER_CHARS` counts as no answer,
and `extract_answer` never raises.

Order of precedence (the first pattern that yields a usable answer wins):
  1. the last `\\boxed{...}` / `\\fbox{...}` (nested braces), or `\\boxed 5`;
  2. GSM8K's `#### x`;
  3. "the answer is x" / "final answer: x" (case-insensitive);
  4. only with `last_number_fallback`: the last number (`-1,234.5`, `3/4`).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator

TAIL_CHARS = 20_000
MAX_ANSWER_CHARS = 1_000
MAX_COMPLETION_CHARS = 100_000  # default cut for completions before any reward sees them (clip_completion)

_BOX_COMMANDS = ("\\boxed", "\\fbox")
# `answer is`, `answer:`, `answer is:`; the last one in the text wins ("Final Answer: The final answer is 5").
_ANSWER_PHRASE = re.compile(r"\banswer\s*(?:is\b\s*:?|:)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
# "18 dollars" -> "18" (only after an answer phrase, where prose follows the number).
_NUMBER_THEN_WORDS = re.compile(r"(-?\d[\d,]*(?:\.\d+)?)\s+[A-Za-z][A-Za-z ]*")
# A sign only where it can't be a binary minus ("10-3" ends in 3, not -3).
_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|(?<!\d)\.\d+")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def extract_answer(text: str, last_number_fallback: bool = False) -> str | None:
    """The final answer of a completion as a clean string, or None when there is none.

    Never raises: a completion is untrusted input, and one bad completion must cost one reward,
    not a training step.
    """
    if not isinstance(text, str) or not text:
        return None
    finders = [_last_boxed, _after_hashes, _after_answer_phrase]
    if last_number_fallback:
        finders.append(_last_number)
    for find in finders:
        try:
            answer = clean_answer(find(text))
        except Exception:  # noqa: BLE001 - a safety net for inputs nobody thought of
            answer = None
        if answer is not None:
            return answer
    return None


def extract_boxed_raw(text: str) -> str | None:
    """The Co-rewarding authors' extraction, kept for fidelity: the raw content of the last `\\boxed{...}`,
    uncleaned, with their quirks (verl/utils/reward_score/math.py `last_boxed_only_string` + `remove_boxed`,
    called from co_reward.py / co_rewarding_II.py `extract_answer`):

      * if `\\boxed ` (with a space) occurs anywhere, the answer is what follows its last occurrence up to `$`;
      * else the last `\\boxed`, braces matched without escapes; no `####`, no "the answer is", no cleaning;
      * `\\fbox{...}` and an unclosed box give no answer (their `remove_boxed` assertion fails, caught as '').

    None where they got ''. Linear in the text; an answer over `MAX_ANSWER_CHARS` counts as none, as in
    `extract_answer` (the authors had no bound; a real answer is never that long).
    """
    if not isinstance(text, str) or "\\boxed" not in text:
        return None
    if "\\boxed " in text:
        answer = text[text.rfind("\\boxed ") + len("\\boxed "):].split("$", 1)[0]
    else:
        start = text.rfind("\\boxed")
        depth, answer = 0, None
        for i in range(start, min(len(text), start + len("\\boxed") + MAX_ANSWER_CHARS + 2)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    boxed = text[start : i + 1]
                    # remove_boxed: must be `\\boxed{...}` exactly (`\\boxedx{..}` fails its assertion)
                    answer = boxed[len("\\boxed{"):-1] if boxed.startswith("\\boxed{") else None
                    break
    if answer is None or not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return None
    return answer


def encodable(text: str) -> str:
    """`text` with lone surrogates (undecodable bytes read with `surrogateescape`, `\\udcff` escapes in an
    endpoint's JSON) replaced by '?'. Fast tokenizers and UTF-8 request bodies refuse strings that are not
    valid Unicode; `text` itself comes back when it is (the common case costs one encode)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def clip_completion(text: str, max_chars: int | None) -> str:
    """`text` itself when it has at most `max_chars` characters, else its last `max_chars` (the final
    answer is at the end). Bounds what every reward source, the RM template and the logs hold per
    completion, whatever a policy or an endpoint produced. `max_chars` None or 0: no limit."""
    if not isinstance(text, str):
        return ""
    if not max_chars or len(text) <= max_chars:
        return text
    return text[-max_chars:]


def clean_answer(raw: str | None) -> str | None:
    """Strip what surrounds an answer (whitespace, `$`, `**`, a final period, `\\$`), drop NULs,
    replace lone surrogates, and remove thousands separators from a plain number ("1,000" -> "1000").

    Returns None for an empty answer or one longer than `MAX_ANSWER_CHARS`.
    """
    text = None if raw is None else raw.strip()
    if not text or len(text) > MAX_ANSWER_CHARS:  # checked first: keeps the loop below cheap
        return None
    text = text.replace("\x00", "").replace("\\$", "")
    text = text.encode("utf-8", "replace").decode("utf-8")
    previous = None
    while text != previous:
        previous = text
        text = text.strip().strip("$*").strip()
        if text.endswith(".") and not text.endswith(".."):
            text = text[:-1]
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    return text or None


def _last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` (or `\\boxed 5`), found with `rfind` and a
    brace-matching scan that stops after `MAX_ANSWER_CHARS`: linear, no regex over the whole text."""
    start, command = max((text.rfind(c), c) for c in _BOX_COMMANDS)
    if start < 0:
        return None
    i = start + len(command)
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "{":
        return _braced(text, i)
    if i > start + len(command):  # `\boxed 5`: one token after the space
        end = i
        while end < len(text) and not text[end].isspace() and text[end] != "$":
            end += 1
        return text[i:end]
    return None


def unescaped_braces(text: str, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, str]]:
    """(index, char) of each `{` and `}` in `text[start:stop]`; a backslash escapes the next character,
    so `\\{` and `\\}` are literal braces and are skipped."""
    i, stop = start, len(text) if stop is None else min(stop, len(text))
    while i < stop:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char in "{}":
            yield i, char
        i += 1


def _braced(text: str, open_at: int) -> str | None:
    """The text between `text[open_at] == "{"` and its matching `}`; None when unclosed or too long."""
    depth = 0
    for i, char in unescaped_braces(text, open_at, open_at + MAX_ANSWER_CHARS + 2):
        depth += 1 if char == "{" else -1
        if depth == 0:
            return text[open_at + 1 : i]
    return None


def _after_hashes(text: str) -> str | None:
    """GSM8K's final-answer line: what follows the last `####` on its line."""
    tail = text[-TAIL_CHARS:]
    at = tail.rfind("####")
    if at < 0:
        return None
    return tail[at + 4 :].split("\n", 1)[0]


def _after_answer_phrase(text: str) -> str | None:
    """What follows the last "answer is" / "answer:" up to the end of its line or sentence."""
    tail = text[-TAIL_CHARS:]
    last = _last_match(_ANSWER_PHRASE, tail)
    if last is None:
        return None
    answer = tail[last.end() :].split("\n", 1)[0]
    if end := _SENTENCE_END.search(answer):
        answer = answer[: end.start()]
    answer = answer.replace("**", "").strip().strip("$").strip()  # markdown bold: "is **18** dollars"
    if len(answer) > MAX_ANSWER_CHARS:
        return None
    if number := _NUMBER_THEN_WORDS.fullmatch(answer):
        return number.group(1)
    return answer


def _last_number(text: str) -> str | None:
    """The last number in the text: `-3`, `1,234.5`, `.5`, `3/4`."""
    last = _last_match(_NUMBER, text[-TAIL_CHARS:])
    return None if last is None else last.group(0)


def _last_match(pattern: re.Pattern, text: str) -> re.Match | None:
    """The last non-overlapping match, in one linear scan and constant memory."""
    last = deque(pattern.finditer(text), maxlen=1)
    return last[0] if last else None
