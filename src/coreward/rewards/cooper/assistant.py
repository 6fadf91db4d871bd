"""Cooper's assistant: given a problem and a correct solution, write a plausible but wrong one.

The wrong solution is the reward model's negative. It must look like the positive (same problem, similar
length, same style and answer format) so that the RM learns to read the answer, not the surface. Three
backends, one interface (`Assistant.write`):

* `LLMAssistant` over any `coreward.llm.TextGenerator`: an OpenAI-compatible endpoint
  (`"http://host:8000/v1#Qwen2.5-7B-Instruct"`, with its concurrency limit, timeouts, retries and deadline)
  or a local Hugging Face model (a path or hub id). It is asked, as the authors asked, for a completely
  wrong, misleading solution of similar length that sounds plausible, at temperature 0.7.
* `PerturbationAssistant` (`"perturb"`): no model at all, for CPU runs. It rewrites the numbers of the
  derivation and the final answer (see `perturb`), so the result reads like the positive but is wrong.

Results follow `coreward.llm`'s contract: one `GenerationResult` per request, in order; a fault (endpoint
down, timeout, nothing to perturb) is `text=None` with an `error`, never an exception. Whether a text is an
acceptable negative (its answer must not verify equal to the positive's) is Cooper's check, not the assistant's.
"""

from __future__ import annotations

import logging
import random
import re
import time
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from coreward.llm import (
    GenerationRequest,
    GenerationResult,
    TextGenerator,
    build_generator,
)


logger = logging.getLogger(__name__)


@dataclass
class NegativeRequest:
    """One negative to write: the problem, the correct solution to imitate, and a seed for repeatability."""

    question: str
    positive: str
    answer: str  # the positive's final answer (as extracted by the verifier)
    seed: int


class Assistant(ABC):
    @abstractmethod
    def write(self, requests: list[NegativeRequest]) -> list[GenerationResult]:
        """One result per request, same order; per-item faults are results with an error."""

    def close(self) -> None:  # noqa: B027 - an optional hook: assistants holding nothing keep this one
        """Release the backend (connections, model memory)."""


# --------------------------------------------------------------------------- an LLM asked for a wrong solution

SYSTEM_PROMPT = (
    "You write a completely incorrect and misleading solution to a math problem. You are given the problem "
    "and a correct solution. Your solution must:\n"
    "1. use wrong reasoning and wrong calculations throughout;\n"
    "2. reach a wrong final answer;\n"
    "3. be about as long as the correct solution, in the same style and the same final-answer format;\n"
    "4. look like a genuine attempt at this very problem;\n"
    "5. sound plausible."
)
USER_TEMPLATE = (
    "Math problem: {question}\n\nCorrect solution: {positive}\n\n"
    "Write only the solution process and the final answer, nothing else."
)

# The authors' prompts, verbatim (ZJU-REAL/Cooper recipe/cooper/collaborate.py,
# `_call_api_for_negative_response`), indentation included: their triple-quoted strings sit inside a method.
AUTHORS_SYSTEM_PROMPT = """You are tasked with generating a completely incorrect and misleading response. Given a math problem and a correct response, you must:
    1. Provide wrong reasoning and logic throughout
    2. Reach an incorrect conclusion or result
    3. Make the response similar in length to the correct response
    4. Ensure the response appears to solve the math problem but is factually wrong
    5. Use plausible-sounding but incorrect information
    """
AUTHORS_USER_TEMPLATE = """Math Problem: {question}

    Correct Response: {positive}

    The following only needs to give the process of solving the question and the answer, do not give any irrelevant content."""
PROMPTS = {"coreward": (SYSTEM_PROMPT, USER_TEMPLATE), "authors": (AUTHORS_SYSTEM_PROMPT, AUTHORS_USER_TEMPLATE)}
# the authors' reply budget: the positive's word count plus this many tokens, room for "similar length"
REPLY_EXTRA_TOKENS = 500


class LLMAssistant(Assistant):
    """Asks a text generator (endpoint or local model) for the wrong solution, with the authors' settings.

    `prompt="coreward"` (default) is our wording of their request, plus "same style and final-answer format"
    so the negative differs from the positive in its answer rather than its surface; `"authors"` is theirs.
    """

    def __init__(self, generator: TextGenerator, temperature: float = 0.7, prompt: str = "coreward"):
        if prompt not in PROMPTS:
            raise ValueError(f"assistant prompt must be one of {sorted(PROMPTS)}, got {prompt!r}")
        self.generator = generator
        self.temperature = temperature
        self.system_prompt, self.user_template = PROMPTS[prompt]

    def write(self, requests: list[NegativeRequest]) -> list[GenerationResult]:
        return self.generator.generate([self._chat(request) for request in requests])

    def _chat(self, request: NegativeRequest) -> GenerationRequest:
        messages = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.user_template.format(question=request.question, positive=request.positive)},
        ]
        max_tokens = len(request.positive.split()) + REPLY_EXTRA_TOKENS
        return GenerationRequest(messages, temperature=self.temperature, max_tokens=max_tokens, seed=request.seed)

    def close(self) -> None:
        self.generator.close()


# --------------------------------------------------------------------------- offline: rewrite the numbers

# `a op b = c`: demo steps (`12+5=17;`) and GSM8K calculator annotations (`<<48/2=24>>`) alike
_EQUATION = re.compile(r"(\d+(?:\.\d+)?)\s*([-+*/×])\s*(\d+(?:\.\d+)?)\s*=\s*(-?\d+(?:\.\d+)?)")
_EXPRESSION = re.compile(r"(\d+(?:\.\d+)?)\s*([-+*/×])\s*(\d+(?:\.\d+)?)")  # a final answer left unevaluated
# a sign only where it can't be a binary minus ("17-3": 3, not -3), as in verify/extract.py
_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?\d+(?:\.\d+)?")
_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "×": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


def perturb(solution: str, answer: str, rng: random.Random) -> str | None:
    """A wrong solution that reads like `solution`: one slip, carried through every later number.

    A slip point is drawn among the derivation's equations `a op b = c` and the final line: the result there
    moves by ±1..3; every later equation whose operands moved is recomputed, every later mention of a moved
    value is rewritten, and the final answer is the carried value (or moves by the slip when nothing reached
    it). `12+5=17;17-3=14;#### 14` becomes e.g. `12+5=19;19-3=16;#### 16` (slip in the first step) or
    `12+5=17;17-3=14;#### 15` (right steps, another final answer): the two kinds of wrong a policy makes.
    A final answer that is an equation (`14 + 13 = 27`, what a policy trained on a rule's reward writes) moves its
    right-hand side; one that is an expression (`2 + 14`, which the rule evaluates) moves its last operand. None when
    the final answer is neither (nothing to move).
    """
    final = _value(answer)
    if final is None:
        return _move_expression(solution, answer, rng)  # `2 + 14`, or `2 + 15 = 2 + 15`'s right side
    equations = list(_EQUATION.finditer(solution))
    slip_at = rng.randrange(len(equations) + 1)  # len(equations): the final line only
    delta = rng.choice((1, 2, 3)) * rng.choice((-1, 1))
    text, negative = _rewrite(solution, final, equations, slip_at, delta)
    if negative:  # a count carried below zero would give the forgery away: slip the other way
        delta = -delta
        text, _ = _rewrite(solution, final, equations, slip_at, delta)
    if text == solution:  # the final line is the last equation itself, left whole: its result is the answer
        text = _move_last(solution, final, final + delta)
    if text == solution:  # its value is written nowhere as a number (`\\boxed{8/4}`): never the positive itself
        return _move_expression(solution, answer, rng)
    return text


def _move_expression(solution: str, answer: str | None, rng: random.Random) -> str | None:
    """The solution with the last `a op b` that the final answer states (itself, or an equation's right-hand side)
    written `a op b'`: b moves by ±1..3 so that the value moves and stays >= 0 (a policy's `\\boxed{2 + 14}` becomes
    `\\boxed{2 + 13}`). None if there is none."""
    stated = _EXPRESSION.fullmatch(stated_value(answer or "").strip())
    if stated is None or (stated[2] == "/" and Fraction(stated[3]) == 0):
        return None
    a, apply, b = Fraction(stated[1]), _OPS[stated[2]], Fraction(stated[3])
    pattern = re.compile(rf"{re.escape(stated[1])}\s*{re.escape(stated[2])}\s*({re.escape(stated[3])})(?![\d.])")
    last = next(reversed(list(pattern.finditer(solution))), None)
    if last is None:
        return None
    value = apply(a, b)
    for delta in rng.sample((1, -1, 2, -2, 3, -3), 6):
        moved = b + delta
        if moved < 0 or (stated[2] == "/" and not moved):
            continue
        if apply(a, moved) != value and apply(a, moved) >= 0:
            return solution[: last.start(1)] + _format(moved) + solution[last.end(1) :]
    return None


def _move_last(text: str, old: Fraction, new: Fraction) -> str:
    """`text` with its last mention of the number `old` written as `new`."""
    last = None
    for match in _NUMBER.finditer(text):
        if Fraction(match.group(0)) == old:
            last = match
    return text if last is None else text[: last.start()] + _format(new) + text[last.end() :]


def _rewrite(solution: str, final: Fraction, equations: list[re.Match], slip_at: int, delta: int) -> tuple[str, bool]:
    """The solution with the slip carried through, and whether a value that was >= 0 went negative."""
    changed: dict[Fraction, Fraction] = {}  # old value -> new value, from the slip on
    pieces, cursor = [], 0
    for i, match in enumerate(equations):
        pieces.append(_rewrite_numbers(solution[cursor : match.start()], changed))
        pieces.append(_rewrite_equation(match, changed, delta if i == slip_at else 0))
        cursor = match.end()
    changed.setdefault(final, final + delta)  # nothing carried the slip to the final answer: move it too
    pieces.append(_rewrite_numbers(solution[cursor:], changed))
    return "".join(pieces), any(old >= 0 > new for old, new in changed.items())


def _rewrite_equation(match: re.Match, changed: dict[Fraction, Fraction], slip: int) -> str:
    """The equation with moved operands, its result recomputed (or slipped); records a moved result."""
    a, op, b, result = match.groups()
    old_a, old_b, old_result = Fraction(a), Fraction(b), Fraction(result)
    new_a, new_b = changed.get(old_a, old_a), changed.get(old_b, old_b)
    new_result = old_result
    if slip:
        new_result = old_result + slip
    elif (new_a, new_b) != (old_a, old_b):
        try:
            new_result = _OPS[op](new_a, new_b)
        except ZeroDivisionError:
            new_result = old_result + 1
    if new_result != old_result:
        changed[old_result] = new_result
    text = match.group(0)
    offset = match.start()
    for group, value in ((4, new_result), (3, new_b), (1, new_a)):  # right to left: spans stay valid
        start, end = match.span(group)
        text = text[: start - offset] + _format(value) + text[end - offset :]
    return text


def _rewrite_numbers(text: str, changed: dict[Fraction, Fraction]) -> str:
    if not changed:
        return text

    def replace(match: re.Match) -> str:
        value = Fraction(match.group(0))
        return _format(changed[value]) if value in changed else match.group(0)

    return _NUMBER.sub(replace, text)


def _value(text: str) -> Fraction | None:
    """The number a final answer states: the answer itself, or the right-hand side of an equation `... = c`."""
    if text is None:
        return None
    try:
        return Fraction(stated_value(text).strip())
    except (ValueError, ZeroDivisionError):
        return None


def _format(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.4f}".rstrip("0").rstrip(".")


class PerturbationAssistant(Assistant):
    """`perturb` with each request's seed: deterministic, instantaneous, no model."""

    def write(self, requests: list[NegativeRequest]) -> list[GenerationResult]:
        results = []
        for request in requests:
            started = time.perf_counter()
            text = perturb(request.positive, request.answer, random.Random(request.seed))
            latency = time.perf_counter() - started
            error = None if text is not None else (f"final answer {request.answer!r}: no number or `a op b` of it in the "
                                                   "solution to perturb")
            results.append(GenerationResult(text, error, latency))
        return results


def build_assistant(spec: str | dict | Assistant, prompt: str = "coreward") -> Assistant:
    """"perturb"; an endpoint URL (`http://host:port/v1#model`), a local model path or hub id, or a
    `coreward.llm` generator dict (`{"backend": "openai", "base_url": ..., "max_retries": 2}`); or an Assistant.
    `prompt` picks an LLM assistant's wording ("coreward" or "authors")."""
    if isinstance(spec, Assistant):
        return spec
    if spec == "perturb":
        return PerturbationAssistant()
    return LLMAssistant(build_generator(spec), prompt=prompt)


# --------------------------------------------------------------------------- Cooper's negatives


@dataclass
class Negatives:
    """What the assistant produced for one step: a negative per request (None: the pair is dropped)."""

    texts: list[str | None]
    failures: int = 0  # requests that came back empty-handed (endpoint down, timeout, nothing to perturb)
    rejected: int = 0  # texts refused because their answer still verified equal to the positive's, or had none
    last_error: str | None = None  # why the last failed request failed (the endpoint's error text)
    latencies: list[float] = field(default_factory=list)

    def report(self, log, step: int) -> None:
        """Log the step's assistant/failures, assistant/rejected and mean latency through `log(name, value)`; warn when
        requests failed and none gave a negative (`step`: the steps done before this one)."""
        log("assistant/failures", float(self.failures))
        log("assistant/rejected", float(self.rejected))
        if self.latencies:
            log("assistant/latency", sum(self.latencies) / len(self.latencies))
        if self.failures and not any(self.texts):  # metrics.jsonl numbers this step step + 1
            logger.warning("cooper: no assistant request of step %d gave a negative (%d failed; last error: %s); its "
                           "pairs are dropped", step + 1, self.failures, self.last_error or "none given")


def request_seed(*parts: Any) -> int:
    """A stable 32-bit seed from its parts (Python's `hash` of a str changes between processes)."""
    return zlib.crc32(":".join(map(str, parts)).encode())


def stated_value(answer: str) -> str:
    """What a final answer states: an equation's right-hand side (`9 - 2 = 7` -> `7`). A negative is checked against
    it, not against the equation: math-verify holds `9 - 2 = 6` equal to a gold `9 - 2 = 7` (and to `8 - 1 = 7`),
    so every perturbed one-line answer of SmolLM2's Cooper runs came back "still right" and was refused."""
    return answer.rpartition("=")[2].strip() or answer if answer else answer


def write_negatives(assistant: Assistant, verifier, requests: list[NegativeRequest], max_retries: int,
                    accept_answerless: bool = False, retry_failed: bool = False) -> Negatives:
    """Ask for every negative at once; ask again, up to `max_retries` times, for those that came back right
    (`max_retries + 1` attempts in all: the authors' loop makes 3 in all, so their setting is max_retries=2).

    A text with no extractable answer is rejected (it teaches the RM nothing about answers), unless
    `accept_answerless`: the authors compare `verify(parse(negative), parse(positive))` on whole texts, and a
    text math-verify finds no answer in is "not equal", so they accept it. math-verify's parse of a whole text
    also reads its last bare number (`... so 8-1=7.` reads 7), so they reject an unmarked text whose last number is
    the positive's answer; under `accept_answerless` such a text is checked that way too (`whole_text_equal`, in the
    verifier's worker pool under its deadline: a timeout counts as "not equal", as math-verify's own timeout does).

    A request that failed outright is not asked again here: the endpoint backend has already retried it
    with backoff under its deadline, so one dead server costs a step at most that deadline, once. With
    `retry_failed` (the authors' loop: any exception uses up one of its 3 attempts) it is asked again like a
    rejected text, while attempts remain. `failures` counts failed attempts.
    """
    outcome = Negatives(texts=[None] * len(requests))
    pending = list(range(len(requests)))
    for attempt in range(max_retries + 1):
        if not pending:
            break
        asked = [requests[i] for i in pending]
        if attempt:
            asked = [NegativeRequest(r.question, r.positive, r.answer, request_seed(r.seed, attempt)) for r in asked]
        results = assistant.write(asked)
        outcome.latencies += [result.latency_s for result in results]
        written = [(i, result.text) for i, result in zip(pending, results) if result.ok]
        outcome.failures += len(pending) - len(written)
        outcome.last_error = next((r.error for r in reversed(results) if not r.ok and r.error), outcome.last_error)
        golds = [stated_value(requests[i].answer) for i, _ in written]
        verdicts = verifier.verify_completions([text for _, text in written], golds)
        answerless = [k for k, verdict in enumerate(verdicts) if verdict.extracted is None] if accept_answerless else []
        whole_text = dict(zip(answerless, verifier.whole_text_equal([written[k][1] for k in answerless],
                                                                    [golds[k] for k in answerless])))
        pending = [i for i, result in zip(pending, results) if not result.ok] if retry_failed else []
        for k, ((i, text), verdict) in enumerate(zip(written, verdicts)):
            if k in whole_text:  # no answer we read: math-verify's parse of the whole text (its last number) decides
                refused = whole_text[k][0]
            else:
                refused = verdict.correct or verdict.extracted is None
            if refused:
                outcome.rejected += 1
                pending.append(i)
            else:
                outcome.texts[i] = text
    return outcome
