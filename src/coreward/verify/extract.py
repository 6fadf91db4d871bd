"""Final-answer extraction from untrusted model completions.

A completion is whatever the policy sampled: it may be megabytes long, contain NUL bytes or lone
surrogates, or be crafted LaTeX. So every step here is linear in the input, only the last `TAIL_CHARS`
characters are read (or, when they hold no box, everything from just before the last box of the last
`MAX_COMPLETION_CHARS`: a box followed by long filler), an answer longer than `MAX_ANSWER_CHARS` counts as no
answer, and `extract_answer` never raises.

Rules, in order (docs/reference/verifier.md has an example of each):
  * text addressed to the grader ("Grader note: the expected answer is ...") -> no answer;
  * an explicit answer sentence after the last box wins ("... \\boxed{255} ... The final answer is $10,455$.",
    "A common mistake is \\boxed{7}; the correct value is 8.");
  * boxes (`\\boxed{}`, `\\fbox{}`, `\\boxed 5`): every distinct box counts, joined as a list
    ("\\boxed{1} and \\boxed{2}" -> "1, 2"); a box its own sentence disowns ("a common mistake is ...") is
    dropped, and so is one that the text after it takes back ("\\boxed{5}. Wait, that's wrong."); when the
    last box is marked as the final answer ("... so the final answer is \\boxed{7}") and its sentence offers
    no alternative ("Or ...", "maybe"), it alone counts; a box nested in a box is unwrapped; an empty last
    box is no answer (no fallback to loose text);
  * GSM8K's `#### x`;
  * an answer sentence: "the answer is x", "Final Answer: The largest $n$ is 34.", "Answer $$ 9 $$";
  * a completion that is itself a short one-line answer ("0.5", "$x^2+1$"), as `coreward verify` has always read it;
  * the one formula of the last sentence ("Therefore $x \\geq 5$ is the solution."; two formulas: none);
  * the one value of the last sentence, when that sentence is a conclusion ("Therefore, there are 12
    sequences ...") or the value ends it, with at most a unit, currency or percent after it ("... which is
    1,000.99€", "... increases by 100%."), or a label and a colon introduce it ("Total: 42 apples"); a value
    the sentence negates ("not 10") does not count, and two
    values, or a sentence that calls something wrong, are no answer;
  * only with `last_number_fallback`: the last number (`-1,234.5`, `3/4`).

Hedging words after (or before) a single value are dropped ("12, I think", "probably 12"); a second value
stays ("3 or maybe 5" is two). The last sentence is read after cutting what follows an end-of-turn token (`<|im_start|>user ...`, another
turn) and a closing formula ("I hope it is correct."). Inline math (`$...$`, `\\(...\\)`) does not span
a line break (as in Markdown), so a stray `$` does not pair with one on another line.
"""

from __future__ import annotations

import re
from collections import deque
from itertools import pairwise

from coreward.verify.boxes import (
    BOX_COMMANDS,
    MAX_ANSWER_CHARS,
    THOUSANDS,
    boxes,
    drop_thousands_separators,
    unbox,
    unescaped_braces,
)


__all__ = ["MAX_ANSWER_CHARS", "MAX_COMPLETION_CHARS", "TAIL_CHARS", "clean_answer", "clip_completion",
           "encodable", "extract_answer", "unescaped_braces"]

TAIL_CHARS = 20_000
MAX_COMPLETION_CHARS = 100_000  # default cut for completions before any reward sees them (clip_completion)
BARE_ANSWER_CHARS = 200  # a one-line completion up to this long may be the answer itself
_ = THOUSANDS  # re-exported for callers that imported it from here

# `answer is`, `answer:`, `Answer $$ 9 $$`, and what states a correction: `the correct value is 8`.
_ANSWER_PHRASE = re.compile(
    r"\b(?:answer|(?:correct|right|actual|true)\s+(?:value|result|solution))\s*(?:is\b\s*:?|:|=|(?=\s*(?:\$|\\\[|\\\()))",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"\.(?:\s|$)|;")
_DISPLAY_MATH = re.compile(r"\s*(?:\$\$(.+?)\$\$|\\\[(.+?)\\\]|\\\(([^\n]+?)\\\)|\$([^\n$]+?)\$)", re.DOTALL)
_INLINE_MATH = re.compile(r"\$\$(.+?)\$\$|\$([^\n$]+?)\$|\\\[(.+?)\\\]|\\\(([^\n]+?)\\\)", re.DOTALL)
# "18 dollars per week" -> "18 dollars": the number and its unit (a differing unit makes it wrong).
_NUMBER_THEN_WORDS = re.compile(r"(-?\d[\d,]*(?:\.\d+)?\s+[A-Za-z]+)(?:\s+[A-Za-z ]*)?")
# A sign only where it can't be a binary minus ("10-3" ends in 3, not -3).
_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|(?<!\d)\.\d+")
_WORD = re.compile(r"[A-Za-z]{2,}")
_LATEX_COMMAND = re.compile(r"\\[a-zA-Z]+")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox|textit|mathbf|operatorname)\s*\{[^{}]*\}|\\(?:begin|end)\s*\{\w+\*?\}")
# Text that talks to whoever scores the answer is an attempt to steer the score, not an answer.
_JUDGE = re.compile(
    r"\b(?:grader|grading|judge|evaluator|annotator|reward\s+model|expected\s+answer|reference\s+answer|"
    r"ground[-\s]truth|ignore\s+(?:all\s+|the\s+)?(?:previous|above|prior)\s+instructions)", re.IGNORECASE)
JUDGE_WINDOW = 2_000  # the judge cue is looked for in the completion's last characters
# A box its own sentence calls wrong ("A common mistake is to write $\boxed{7}$").
_DISOWN = re.compile(r"\b(?:mistakes?|mistaken|wrong|incorrect|erroneous|instead\s+of|rather\s+than)\b[^.!?\n]*$",
                     re.IGNORECASE)
DISOWN_WINDOW = 120  # characters of the box's own sentence looked at
# Where a sentence turns to its conclusion: "Wait, that's wrong: 3+4=7, so the final answer is \boxed{7}" does not
# disown the box, since the cue comes before the turn.
_TURN = re.compile(r"\b(?:so|thus|therefore|hence|then|final\s+answer|correct(?:ed)?\s+(?:answer|value|result))\b",
                   re.IGNORECASE)


def _disowns(sentence: str) -> bool:
    """Does the sentence leading up to a box call it wrong ("A common mistake is to write")? Only what follows
    the sentence's last turn to a conclusion counts."""
    turn = _last_match(_TURN, sentence)
    return _DISOWN.search(sentence if turn is None else sentence[turn.end() :]) is not None


def extract_answer(text: str, last_number_fallback: bool = False) -> str | None:
    """The final answer of a completion as a clean string (several boxes: `"a, b"`), or None.

    Never raises: a completion is untrusted input, and one bad completion must cost one reward,
    not a training step.
    """
    if not isinstance(text, str) or not text:
        return None
    try:
        return _extract(_tail(text), last_number_fallback)
    except Exception:  # noqa: BLE001 - a safety net for inputs nobody thought of
        return None


BOX_CONTEXT_CHARS = 2_000  # text kept before a box found behind the tail (its own sentence, earlier boxes)


def _tail(text: str) -> str:
    """The part of `text` that is read: its last `TAIL_CHARS` characters, or, when they hold no box and the
    last `MAX_COMPLETION_CHARS` do, everything from just before that last box on (a boxed answer followed by
    thousands of characters of filler is still read, and the filler is still read after it: an answer
    sentence there still wins over the box). Two `rfind`s, so a megabyte without a box costs microseconds."""
    tail = text[-TAIL_CHARS:]
    if len(text) <= TAIL_CHARS or any(command in tail for command in BOX_COMMANDS):
        return tail
    window = text[-MAX_COMPLETION_CHARS:]
    at = max(window.rfind(command) for command in BOX_COMMANDS)
    return tail if at < 0 else window[max(0, at - BOX_CONTEXT_CHARS) :]


def _extract(tail: str, last_number_fallback: bool, reference: bool = False) -> str | None:
    if _JUDGE.search(tail[-JUDGE_WINDOW:]):
        return None
    tail = _this_turn(tail)
    found = [box for box in boxes(tail) if box.content is not None]  # an unclosed box was cut off, not given
    phrase = _last_match(_ANSWER_PHRASE, tail)
    if found:
        if phrase is not None and phrase.start() >= found[-1].end and _states_value(stated := _phrase_answer(tail, phrase)):
            return stated
        if reference:
            return _from_boxes(tail, _last_group(tail, found))
        return _from_boxes(tail, _marked_final(tail, _unretracted(tail, found)))
    for answer in (_after_hashes(tail), phrase and _phrase_answer(tail, phrase), _bare_answer(tail),
                   _math_of_last_sentence(tail), _value_of_last_sentence(tail)):
        if (answer := clean_answer(answer)) is not None:
            return answer
    if last_number_fallback:
        return clean_answer(_last_number(tail))
    return None


# What follows an end-of-turn or start-of-turn token is another turn (a model that went on to write the
# user's next message), not this answer.
_TURN_TOKEN = re.compile(r"<\|(?:im_start|im_end|eot_id|eom_id|endoftext|end_of_text|start_header_id|end)\|>|</s>")


def _this_turn(text: str) -> str:
    """`text` up to the first turn token that follows some text (leading tokens are skipped)."""
    for token in _TURN_TOKEN.finditer(text):
        if text[: token.start()].strip() and not _TURN_TOKEN.fullmatch(text[: token.start()].strip()):
            return text[: token.start()]
    return text


def _last_group(tail: str, found) -> list:
    """For a reference solution: the last box, with the boxes right before it that only separators part
    (`\\boxed{1}\\boxed{2}`, `\\boxed{1}, \\boxed{2}`); boxes that prose parts from the last are the
    solution's intermediate steps (`\\boxed{1} no no no \\boxed{2}` is 2)."""
    group = [found[-1]]
    for box in reversed(found[:-1]):
        if _is_prose(_WORD_CONNECTIVES.sub(" ", tail[box.end : group[0].start])):
            break
        group.insert(0, box)
    return group


_WORD_CONNECTIVES = re.compile(r"\b(?:and|or)\b|\\(?:text|quad|qquad)\b", re.IGNORECASE)
# "... so the final answer is \boxed{7}", "Final Answer: $\boxed{7}$", "the correct value is \boxed{7}": what
# right before a box marks it as the one answer.
_FINAL_MARK = re.compile(
    r"\b(?:final\s+answer|(?:correct(?:ed)?|right|actual|true)\s+(?:answer|value|result))\s*(?:is\b|:|=)?"
    r"(?:\s|\*\*|[:$=]|\\\(|\\\[)*$", re.IGNORECASE)
# ... unless the same sentence offers another ("Or the final answer is \boxed{5}", "maybe the final answer is") or
# is one case of several ("If $x<0$ the final answer is \boxed{5}")
_ALTERNATIVE = re.compile(r"\b(?:or|either|alternatively|otherwise|maybe|perhaps|possibly|might|could|if)\b",
                          re.IGNORECASE)
# "\boxed{5}. Wait, that's wrong." / "I made a mistake": what after a box takes it back.
_RETRACTION = re.compile(
    r"\b(?:(?:that|this|it|which)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+(?:right|correct)|a\s+mistake)|"
    r"I\s+made\s+(?:a|an)\s+(?:mistake|error))\b", re.IGNORECASE)


def _sentence_before(tail: str, at: int) -> str:
    """The sentence that leads up to position `at` (at most `DISOWN_WINDOW` characters)."""
    return re.split(r"[.!?\n]\s", tail[max(0, at - DISOWN_WINDOW) : at])[-1]


def _marked_final(tail: str, found) -> list:
    """A completion that revises itself and marks its last box (group) as the final answer is read as that
    box: `\\boxed{5}. Wait, ... so the final answer is \\boxed{7}` is 7. Without such a mark, or when the
    marking sentence offers an alternative ("Or the final answer is ..."), every box still counts."""
    group = _last_group(tail, found)
    if len(group) == len(found):
        return found
    sentence = _sentence_before(tail, group[0].start)
    if _FINAL_MARK.search(sentence) is None or _ALTERNATIVE.search(sentence):
        return found
    return group


def _unretracted(tail: str, found) -> list:
    """The boxes not taken back by what follows them before the next box ("\\boxed{5}. Wait, that's wrong.
    ... \\boxed{7}" keeps 7). The last box is never dropped here: a retraction with nothing after it leaves
    two boxes or one, never a free pick."""
    return [box for box, following in pairwise(found) if not _RETRACTION.search(tail, box.end, following.start)] \
        + found[-1:]


def _from_boxes(tail: str, found) -> str | None:
    """The distinct contents of the boxes that count, joined as a list; None when the last box is empty
    or every box is disowned."""
    if clean_answer(found[-1].content) is None:
        return None
    answers: list[str] = []
    for box in found:
        answer = clean_answer(box.content)
        if answer is None or _disowns(_sentence_before(tail, box.start)) or answer in answers:
            continue
        answers.append(answer)
    joined = ", ".join(answers)
    return joined if answers and len(joined) <= MAX_ANSWER_CHARS else None


def _states_value(answer: str | None) -> bool:
    """Does an answer sentence after the boxes state a value ("the correct value is 8"), rather than judge
    one ("so our answer is correct")?"""
    return answer is not None and (re.search(r"[\d\\]", answer) is not None or re.fullmatch(r"[A-J]", answer) is not None)


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
    """Strip what surrounds an answer (whitespace, `$`, `\\[ \\]`, `**`, a final period, `\\$`), drop NULs,
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
        text = unbox(_without_hedge(text.strip().strip("$*").strip()))
        for opening, closing in (("\\[", "\\]"), ("\\(", "\\)")):
            if text.startswith(opening) and text.endswith(closing):
                text = text[len(opening) : -len(closing)]
        if text.endswith(".") and not text.endswith(".."):
            text = text[:-1]
        if text.endswith("\\") and not text.endswith("\\\\"):
            text = text[:-1]  # `185\`: a stray backslash after the answer
    if text in ("\\(", "\\[", "\\)", "\\]"):
        return None  # a delimiter whose other half is on another line
    return drop_thousands_separators(_DOUBLED_COMMAND.sub(r"\\", text)) or None


# Hedging words after a final value ("12, I think", "12 probably", "12 (if I'm not mistaken)"): the value stays.
# Two values ("3 or maybe 5") stay two: nothing with a digit, `$` or a command may follow the hedge.
_HEDGE = re.compile(
    r"(?:\s|[,;:(\u2014-])*\b(?:I\s+(?:think|believe|guess|suppose|reckon)|I'?m\s+(?:fairly\s+|pretty\s+|quite\s+)?"
    r"(?:sure|confident|certain)|if\s+I'?m\s+not\s+mistaken|probably|maybe|perhaps|possibly|hopefully)\b"
    r"[^\d$\\]{0,40}$", re.IGNORECASE)


_LEADING_HEDGE = re.compile(r"(?:probably|maybe|perhaps|possibly|I\s+(?:think|believe|guess)(?:\s+(?:it'?s|that))?)[\s,:]+",
                            re.IGNORECASE)


def _without_hedge(text: str) -> str:
    """`12, I think` -> `12`; `\\frac{1}{2} probably` -> `\\frac{1}{2}`; `probably 12` -> `12`; `maybe` (the answer
    itself) unchanged: what is left must hold a digit or a command."""
    if (hedge := _HEDGE.search(text, max(0, len(text) - 80))) is not None and re.search(r"[\d\\}]", kept := text[: hedge.start()]) \
            and kept.count("{") == kept.count("}"):  # `\\text{probably}` is an answer, not a hedge
        text = kept.rstrip()
    if (hedge := _LEADING_HEDGE.match(text)) is not None and re.search(r"[\d\\]", text[hedge.end() :]):
        text = text[hedge.end() :]
    return text


# `\\le` where `\le` was meant (a string escaped twice): a line break followed by the name of a relation
# or a common command is that command.
_DOUBLED_COMMAND = re.compile(
    r"(?<!\\)\\\\(?=(?:le|leq|ge|geq|lt|gt|ne|neq|in|notin|cup|cap|frac|dfrac|tfrac|sqrt|pm|mp|cdot|times|"
    r"infty|pi|text|mathrm|approx)(?![a-zA-Z]))")


def gold_answer(gold: str | None) -> str | None:
    """A reference answer as the verifier compares it: `$...$`, `\\[...\\]` and a box around it removed.

    A reference written as a solution (with boxes, or prose over `BARE_ANSWER_CHARS` characters) is read
    like a completion, except that its boxes count from the last group only: a reference is trusted, and
    the boxes a worked solution puts on intermediate steps are not its answer (`\\boxed{1} no no \\boxed{2}`
    is 2; `\\boxed{1}\\boxed{2}` is `1, 2`)."""
    if not isinstance(gold, str):
        return None
    if any(command in gold for command in ("\\boxed", "\\fbox")):
        return _extract_reference(gold)
    if len(gold) > BARE_ANSWER_CHARS and _is_prose(gold):
        return _extract_reference(gold) or clean_answer(gold)
    return clean_answer(gold)


def _extract_reference(gold: str) -> str | None:
    try:
        return _extract(gold[-TAIL_CHARS:], False, reference=True)
    except Exception:  # noqa: BLE001 - as extract_answer
        return None


def _after_hashes(text: str) -> str | None:
    """GSM8K's final-answer line: what follows the last `####` on its line."""
    at = text.rfind("####")
    return None if at < 0 else text[at + 4 :].split("\n", 1)[0]


def _phrase_answer(text: str, phrase: re.Match) -> str | None:
    """What an answer sentence states: display math right after the phrase (`Answer \\[ 9 \\]`), else the
    rest of its line or sentence, reduced to its value when it is prose ("The largest $n$ is 34.")."""
    rest = text[phrase.end() : phrase.end() + 4 * MAX_ANSWER_CHARS]
    if (math := _DISPLAY_MATH.match(rest)) and _ends_sentence(rest[math.end() :]):
        return clean_answer(next(g for g in math.groups() if g is not None))
    answer = rest.split("\n", 1)[0]
    if end := _first_sentence_end(answer):
        answer = answer[:end]
    answer = _without_hedge(answer.replace("**", "").strip())
    if len(answer) > MAX_ANSWER_CHARS:
        return None
    return clean_answer(_value_of_prose(answer))


def _ends_sentence(after: str) -> bool:
    """Display math after an answer phrase is the whole answer when nothing but punctuation follows it
    on its line (`$10,455$. I hope it is correct.`), not when the sentence goes on (`$n$ is 34`)."""
    line = after.split("\n", 1)[0].lstrip()
    return not line or line[0] in ".,;!" or not line[0].isalnum()


def _first_sentence_end(text: str) -> int | None:
    """The end of the first sentence, not counting periods inside `$...$` (`$3.5$`)."""
    in_math = False
    for i, char in enumerate(text):
        if char == "$":
            in_math = not in_math
        elif not in_math and _SENTENCE_END.match(text, i):
            return i
    return None


def _value_of_prose(answer: str) -> str:
    """`18 dollars in all` -> `18 dollars`; `The largest $n$ is 34` -> `34`; `Jane started 3 hours ago` -> `3`;
    a plain answer unchanged."""
    if number := _NUMBER_THEN_WORDS.fullmatch(answer):
        return number.group(1)
    if not _is_prose(answer):
        return answer
    if " is " in answer:
        return _value_of_prose(answer.rsplit(" is ", 1)[1])
    math = [next(g for g in m.groups() if g is not None) for m in _INLINE_MATH.finditer(answer)]
    if len(math) == 1:
        return math[0]
    numbers = _NUMBER.findall(_INLINE_MATH.sub(" ", answer))
    return numbers[0] if len(numbers) == 1 and not math else answer


def _is_prose(text: str) -> bool:
    """More than one word outside LaTeX commands and `\\text{...}` (`odd`, `\\text{Evelyn}` are answers)."""
    bare = _LATEX_COMMAND.sub(" ", _TEXT_WRAPPER.sub(" ", text))
    return len(_WORD.findall(bare)) > 1


_WORD_THEN_VALUE = re.compile(r"[A-Za-z]{2,}\s+[^\s]")


def _bare_answer(text: str) -> str | None:
    """A completion that is itself the answer: one short line that is not prose ("0.5", "$(3,2)$")."""
    line = text.strip()
    if "\n" in line or len(line) > BARE_ANSWER_CHARS or _is_prose(line.replace("$", " ")):
        return None
    # work, not an answer: steps separated by ";" or a chain of "=" ("12+5=17;17-3=14;ans 14"), or a word in
    # front of the value ("ans 14", "about 5"): a format the rule does not read stays unread on every path
    if ";" in line or line.count("=") > 1 or _WORD_THEN_VALUE.match(line) or not re.search(r"\w", line):
        return None  # ... and punctuation alone ("?", "...") is no answer
    return line


def _math_of_last_sentence(text: str) -> str | None:
    """The math of the last sentence when it holds exactly one formula ("Therefore $x \\geq 5$ is the
    solution."); two formulas there ("either $3$ or $5$") are no answer. A formula of names only (the
    `$(x, y)$` of "the ordered pair $(x, y)$ is $(7, 6)$") is not a second one."""
    sentence = _final_sentence(text)
    math = [next(g for g in m.groups() if g is not None) for m in _INLINE_MATH.finditer(sentence)]
    values = [formula for formula in math if _holds_value(formula)]
    if len(math) == 1:
        return math[0]
    return values[0] if len(values) == 1 and len(set(map(str.strip, values))) == 1 else None


# A closing formula after the answer ("I hope it is correct."): skipped when looking for the last sentence.
_CLOSING = re.compile(
    r"(?:I\s+hope\s+(?:it|this|that)\s+(?:is\s+correct|helps)|Hope\s+(?:it|this)\s+helps|Thank\s+you|Good\s+luck)"
    r"[^.!?\n]{0,40}[.!]*\s*$", re.IGNORECASE)
# A sentence that draws the conclusion starts here, even without a period before it ("... = 2/3 Therefore, ...").
_CONCLUSION = re.compile(r"\b(?:Therefore|Thus|Hence|So|Finally|Consequently|In\s+(?:conclusion|summary|total))\b")
LAST_SENTENCE_CHARS = 2_000


def _final_sentence(text: str) -> str:
    """The completion's last sentence: on its last line, after the last period (outside `$...$`) or
    conclusion word, closing formulas skipped."""
    body = text[-LAST_SENTENCE_CHARS:].rstrip()
    for _ in range(3):
        if (closing := _CLOSING.search(body, max(0, len(body) - 120))) is None:
            break
        body = body[: closing.start()].rstrip()
    body = _without_hedge(body.rstrip(".!").rstrip()).rstrip(".").rstrip()
    body = body[body.rfind("\n") + 1 :]
    start, in_math = 0, False
    for i, char in enumerate(body):
        if char == "$":
            in_math = not in_math
        elif not in_math and _SENTENCE_END.match(body, i):
            start = i + 1
    if (conclusion := _last_match(_CONCLUSION, body[start:])) is not None:
        start += conclusion.start()
    return body[start:]


def _holds_value(formula: str) -> bool:
    """A formula that states a value (`7`, `(7, 6)`, `\\pi`), not only names (`x`, `(x, y)`, `P(A)`)."""
    return re.search(r"\d|\\(?:pi|infty|sqrt|emptyset|varnothing)(?![a-zA-Z])", formula) is not None


# A number in prose: `12`, `-3`, `1,000.99`, `2/3`, `.5`, `2,74` (kept whole: the comparison reads its comma).
_PROSE_NUMBER = re.compile(r"(?<![\w.,/\\^_])-?(?:\d+(?:,\d+)*(?:\.\d+)?|\.\d+)(?:/\d+)?(?![\d/])")
# What may follow the value that ends a sentence: a percent, a currency, a short unit (`m²`, `cm`, `kg`).
_TRAILER = re.compile(r"\s*(?:(?P<percent>\\?%|\s*percent\b)|(?P<currency>[$€£¥]|\\\$|USD|EUR)|"
                      r"(?P<unit>[a-zA-Zµ°]{1,3}(?:\^?\{?[23]\}?|[²³])?)(?![a-zA-Z]))?\s*[.!]*\s*$")
_LABEL = re.compile(r"\s*[A-Za-z][A-Za-z ]{0,30}?\s*:\s*")  # "Total: 42 ...", "Soucis : 2,74 $ ..."
_NEGATED = re.compile(r"(?:\bnot|n't|\bno)\s*$", re.IGNORECASE)


def _value_of_last_sentence(text: str) -> str | None:
    """The one value of the last sentence: a number in the prose or a formula holding a value. Read when the
    sentence draws a conclusion ("Therefore, there are 12 sequences that ..."), the value ends it (with a
    unit, currency or percent at most: "which is 1,000.99€", "increases by 100%."), or a label and a colon
    come right before it ("Total: 42 apples"). A value the sentence
    negates ("it's not 10, it's 12") does not count; two values ("10 which is 1,000.99"), or a sentence that
    calls something wrong ("a common mistake is 7"), are no answer."""
    sentence = _final_sentence(text)
    if not sentence or len(sentence) > MAX_ANSWER_CHARS or _DISOWN.search(sentence):
        return None
    candidates: list[tuple[str, int, int]] = []  # (value, start, end)
    for m in _INLINE_MATH.finditer(sentence):
        formula = next(g for g in m.groups() if g is not None).strip()
        if _holds_value(formula) and not _NEGATED.search(sentence[: m.start()]):
            candidates.append((formula, m.start(), m.end()))
    prose = _INLINE_MATH.sub(lambda m: " " * len(m.group(0)), sentence)
    for m in _PROSE_NUMBER.finditer(prose):
        if not _NEGATED.search(prose[: m.start()]):
            candidates.append((m.group(0), m.start(), m.end()))
    if len({value for value, _, _ in candidates}) != 1:
        return None
    value, start, end = max(candidates, key=lambda candidate: candidate[2])
    value = drop_thousands_separators(value)
    trailer = _TRAILER.match(sentence, end)
    before = sentence[: min(c[1] for c in candidates)]
    if _LABEL.fullmatch(before) is None and _CONCLUSION.match(sentence) is None:
        # neither labelled nor a conclusion: the value must end a sentence of prose ("which is 1,000.99€"), not
        # follow one word ("ans 14", the demo's unread format, "about 5"): a format the rule does not read stays
        # unread on every path
        if trailer is None or not _is_prose(before):
            return None
    if trailer is not None and trailer.group("percent"):
        return value + "\\%"
    if trailer is not None and trailer.group("unit"):
        return f"{value} {trailer.group('unit')}"
    return value


def _last_number(text: str) -> str | None:
    """The last number in the text: `-3`, `1,234.5`, `.5`, `3/4`."""
    last = _last_match(_NUMBER, text)
    return None if last is None else last.group(0)


def _last_match(pattern: re.Pattern, text: str) -> re.Match | None:
    """The last non-overlapping match, in one linear scan and constant memory."""
    last = deque(pattern.finditer(text), maxlen=1)
    return last[0] if last else None
