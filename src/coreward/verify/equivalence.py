"""Is a predicted answer equal to the gold one? math-verify's answer, under a hard per-item deadline.

`math_verify.verify(parse(gold), parse(pred))` (gold first) is the reference, but it is slow (ANTLR
parsing in pure Python plus sympy: 1-50 ms per pair, seconds to hours on nested brackets or towers)
and its own timeout uses SIGALRM, which fails outside the main thread. So a `Verifier`:

1. decides cheap cases itself: equal strings after LaTeX-cosmetic normalization, and answers that are
   both plain arithmetic (`18`, `-0.5`, `\\frac{1}{2^{99}}`), compared as exact rationals;
2. refuses answers whose shape is known to blow up (deep bracket nesting, exponent towers, hundreds of
   terms, huge factorials): not equal, counted as timed out, no math-verify call;
3. sends the rest to worker processes in chunks. A worker runs each item under SIGALRM (`timeout_s`,
   workers run in their own main thread); if it still hasn't answered `KILL_GRACE_S` later (work in C
   that ignores signals), the supervisor kills it, counts the item as timed out, starts a replacement
   and resubmits the rest of the chunk. A batch therefore never hangs, and slow items occupy one worker
   each while the others carry on.

A few comparisons of short, simple answers run in the calling process instead (no pool start, no IPC).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import multiprocessing
import os
import re
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from multiprocessing.connection import wait

from coreward.verify.extract import (
    MAX_ANSWER_CHARS,
    MAX_COMPLETION_CHARS,
    clip_completion,
    extract_answer,
    unescaped_braces,
)

KILL_GRACE_S = 0.5  # a worker silent for timeout_s + this long is killed
IN_PROCESS_MAX = 4  # at most this many simple comparisons run in the caller
# Items cost 1-50 ms each: small chunks balance the workers, and IPC per chunk is well under 1 ms.
CHUNKS_PER_WORKER = 8
CHUNK_MAX = 32
NUMERIC_REL_TOL = Fraction(1, 10**9)  # for non-integers; integers must match exactly

# Static budget for an answer sent to math-verify. Real golds (MATH, MATH-500, OlympiadBench, AIME,
# AMC) have bracket depth <= 3, no exponent towers, <= 47 operators; docs/verification.md has the
# timings behind these limits.
MAX_BRACKET_DEPTH = 6
MAX_OPERATORS = 64
MAX_BIG_LITERAL_DIGITS = 6  # `3^{1234567}` and `1234567!` take seconds in sympy


@dataclass
class VerifyResult:
    """A completion's verdict: `extracted` is its final answer (None: none found); `timed_out` means it
    was not verified within the budget (deadline or refused as too complex), and then `correct` is False."""

    correct: bool
    extracted: str | None
    timed_out: bool = False


@dataclass
class VerifierStats:
    """Running counts of a Verifier, to log how often each path is taken and how often the deadline bites."""

    comparisons: int = 0
    fast_path: int = 0  # decided without math-verify
    math_verify: int = 0  # distinct pairs sent to math-verify (in process or to a worker)
    over_budget: int = 0  # refused before math-verify (counted as timed out)
    timeouts: int = 0  # hit the deadline in a worker (SIGALRM or kill)
    worker_restarts: int = 0
    truncated: int = 0  # completions longer than max_completion_chars, cut to their tail before extraction


# --------------------------------------------------------------------------------------------------
# 1. Cheap decisions
# --------------------------------------------------------------------------------------------------

_COSMETIC = re.compile(r"\s+|\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\\[!,;: $]|\\displaystyle|\{,\}")
_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![a-zA-Z])")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def canonical(answer: str) -> str:
    """The answer without what LaTeX renders identically or what only formats it: spaces,
    `\\left`/`\\right`, thin spaces, `{,}`, `\\$`, thousands separators, and `\\dfrac`/`\\tfrac`
    spelled `\\frac`."""
    text = _FRAC_VARIANTS.sub(r"\\frac", _COSMETIC.sub("", answer.strip().strip("$")))
    return text.replace(",", "") if _THOUSANDS.fullmatch(text) else text


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


# --------------------------------------------------------------------------------------------------
# 2. What may go to math-verify, and what may run in the caller
# --------------------------------------------------------------------------------------------------

_OPERATOR = re.compile(r"[-+*/=,;<>]|\\cdot|\\times|\\div|\\pm")
_BIG = MAX_BIG_LITERAL_DIGITS + 1
_BIG_LITERAL = re.compile(rf"\^\{{?\s*\d{{{_BIG},}}|\d{{{_BIG},}}\s*\)?\s*!")  # in an exponent or before `!`
_SIMPLE = re.compile(r"[0-9a-zA-Z+\-*/.,=\\{}^_ ]{1,40}")


def over_budget(answer: str) -> bool:
    """Would math-verify likely spend seconds on this? Deep nesting, exponent towers, hundreds of terms
    and huge exponents/factorials do (see docs/verification.md); real answers never look like that."""
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


# --------------------------------------------------------------------------------------------------
# 3. math-verify itself
# --------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _math_verify():
    """Import math-verify once, quieting its per-call warnings (we handle timeouts ourselves)."""
    import math_verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return math_verify


@lru_cache(maxsize=4096)
def _parse(answer: str) -> list:
    """math-verify's parse of an answer, wrapped in `\\boxed{}` so it is read as LaTeX.

    Cached: a gold is compared with many predictions (a GRPO group shares one gold)."""
    return _math_verify().parse(f"\\boxed{{{answer}}}", parsing_timeout=None)


def math_verify_equal(gold: str, pred: str) -> bool:
    """`verify(parse(gold), parse(pred))`, gold first, no timeout, no fast path.

    Only for trusted or simple input (it can run for seconds); `Verifier` is the safe entry point."""
    try:
        return bool(_math_verify().verify(_parse(gold), _parse(pred), timeout_seconds=None))
    except Exception:  # noqa: BLE001 - math-verify's own policy: an error is "not equal"
        return False


# --------------------------------------------------------------------------------------------------
# 4. Worker processes
# --------------------------------------------------------------------------------------------------


class _Deadline(BaseException):
    """Raised by SIGALRM in a worker. A BaseException, so math-verify's `except Exception` can't swallow it."""


def _on_alarm(signum, frame):
    raise _Deadline


def _worker_main(conn, timeout_s: float) -> None:
    """Worker loop: receive a chunk of (gold, pred), send back one (correct, timed_out) per item as it
    finishes (so the supervisor knows which item is running and since when)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGALRM, _on_alarm)
    _math_verify()
    conn.send("ready")
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for gold, pred in chunk:
            conn.send(_compare_under_alarm(gold, pred, timeout_s))


def _compare_under_alarm(gold: str, pred: str, timeout_s: float) -> tuple[bool, bool]:
    """(correct, timed_out) for one item under SIGALRM; the outer `try` also catches an alarm that
    fires while the inner `finally` is disarming it."""
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            return math_verify_equal(gold, pred), False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Deadline:
        return False, True


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    ready: bool = False
    chunk: deque | None = None  # (slot, gold, pred) items sent and not yet answered
    since: float = 0.0  # when the item now running started (the last answer or the dispatch)


class _Pool:
    """Worker processes plus the supervision loop that enforces the per-item deadline."""

    def __init__(self, size: int, timeout_s: float, stats: VerifierStats):
        self.timeout_s = timeout_s
        self._stats = stats
        self._ctx = _mp_context()
        self._workers = [self._spawn() for _ in range(size)]

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, args=(child_conn, self.timeout_s), daemon=True)
        process.start()
        child_conn.close()
        return _Worker(process, parent_conn)

    def run(self, pairs: list[tuple[str, str]]) -> list[tuple[bool, bool]]:
        """(correct, timed_out) for each pair, in order."""
        results: list[tuple[bool, bool] | None] = [None] * len(pairs)
        size = max(1, min(CHUNK_MAX, math.ceil(len(pairs) / (CHUNKS_PER_WORKER * len(self._workers)))))
        items = [(slot, gold, pred) for slot, (gold, pred) in enumerate(pairs)]
        queue = deque(deque(items[i : i + size]) for i in range(0, len(items), size))
        while queue or any(w.chunk for w in self._workers):
            for worker in self._workers:
                if worker.ready and not worker.chunk and queue:
                    self._dispatch(worker, queue.popleft())
            waiting = [w for w in self._workers if w.chunk or not w.ready]
            for conn in wait([w.conn for w in waiting], timeout=self._seconds_to_deadline(waiting)):
                self._receive(next(w for w in waiting if w.conn is conn), results, queue)
            self._enforce_deadlines(results, queue)
        return results

    def _dispatch(self, worker: _Worker, chunk: deque) -> None:
        worker.conn.send([(gold, pred) for _, gold, pred in chunk])
        worker.chunk, worker.since = chunk, time.monotonic()

    def _receive(self, worker: _Worker, results: list, queue: deque) -> None:
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                if message == "ready":
                    worker.ready = True
                else:
                    slot, _, _ = worker.chunk.popleft()
                    results[slot] = message
                    worker.since = time.monotonic()
        except (EOFError, OSError):  # the worker died (OOM killer, segfault): its item fails
            if not worker.ready:
                raise RuntimeError("a verifier worker process failed to start") from None
            self._replace(worker, results, queue)

    def _seconds_to_deadline(self, waiting: list[_Worker]) -> float | None:
        running = [w.since for w in waiting if w.chunk]
        if not running:
            return None
        return max(0.0, min(running) + self.timeout_s + KILL_GRACE_S - time.monotonic())

    def _enforce_deadlines(self, results: list, queue: deque) -> None:
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.chunk and now - worker.since > self.timeout_s + KILL_GRACE_S:
                self._replace(worker, results, queue)

    def _replace(self, worker: _Worker, results: list, queue: deque) -> None:
        """Kill a worker; its current item counts as timed out, the rest of its chunk goes back in the queue."""
        _stop(worker, kill=True)
        if worker.chunk:
            slot, _, _ = worker.chunk.popleft()
            results[slot] = (False, True)
            if worker.chunk:
                queue.appendleft(worker.chunk)
        self._workers[self._workers.index(worker)] = self._spawn()
        self._stats.worker_restarts += 1

    def close(self, kill: bool = False) -> None:
        """Stop the workers: politely (finish, then exit) or, with `kill`, at once."""
        for worker in self._workers:
            with contextlib.suppress(OSError, ValueError):  # already dead or closed
                worker.conn.send(None)
        for worker in self._workers:
            _stop(worker, kill=kill)


def _stop(worker: _Worker, kill: bool) -> None:
    if kill:
        worker.process.kill()
    worker.process.join(timeout=0.0 if kill else 2.0)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(timeout=2.0)
    worker.conn.close()


def _mp_context():
    """forkserver (or spawn): callers run inside torch/torchrun processes with threads, where fork is
    unsafe. The forkserver preloads math-verify, so a replacement worker starts in milliseconds."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["math_verify", __name__])
        return ctx
    return multiprocessing.get_context("spawn")


def _default_workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cpus))


# --------------------------------------------------------------------------------------------------
# 5. The public API
# --------------------------------------------------------------------------------------------------


def check_settings(timeout_s: float, num_workers: int | None, max_completion_chars: int | None) -> None:
    """ValueError naming the first unusable setting of a `Verifier` (configs check theirs with this too)."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if num_workers is not None and num_workers < 1:
        raise ValueError(f"num_workers must be >= 1 (or null: one per core), got {num_workers}")
    if max_completion_chars is not None and max_completion_chars < 1:
        raise ValueError(f"max_completion_chars must be >= 1 (or null: no limit), got {max_completion_chars}")


class Verifier:
    """Answer equivalence with a hard per-item deadline; see the module docstring.

    A context manager; its worker pool starts on first need; safe to call from any thread (calls are
    serialized); `close()` stops the workers (a later call starts them again).
    """

    def __init__(self, timeout_s: float = 3.0, num_workers: int | None = None,
                 max_completion_chars: int | None = MAX_COMPLETION_CHARS):
        check_settings(timeout_s, num_workers, max_completion_chars)
        self.timeout_s = float(timeout_s)
        self.max_completion_chars = max_completion_chars
        self.num_workers = num_workers or _default_workers()
        self.stats = VerifierStats()
        self._lock = threading.Lock()
        self._pool: _Pool | None = None
        self._owner_pid = os.getpid()

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._pool is not None and self._owner_pid == os.getpid():
                self._pool.close()
            self._pool = None

    def equivalent(self, golds: list[str], preds: list[str | None]) -> list[bool]:
        """Does each pred equal its gold? (gold first; a None pred is False)."""
        return [correct for correct, _ in self._decide(golds, preds)]

    def verify_completions(
        self, completions: list[str], golds: list[str], last_number_fallback: bool = False
    ) -> list[VerifyResult]:
        """Extract each completion's final answer and compare it with its gold.

        A completion over `max_completion_chars` is cut to its tail first (counted in `stats.truncated`).
        """
        clipped = [clip_completion(c, self.max_completion_chars) if isinstance(c, str) else c for c in completions]
        self.stats.truncated += sum(a is not b for a, b in zip(completions, clipped))
        extracted = [extract_answer(c, last_number_fallback) for c in clipped]
        verdicts = self._decide(golds, extracted)
        return [VerifyResult(c, answer, t) for (c, t), answer in zip(verdicts, extracted)]

    def equivalence_classes(self, answers: list[str | None]) -> list[int | None]:
        """A class id per answer (None stays None), numbered in first-seen order.

        Equal strings share a class without a math-verify call. A new distinct answer joins the first
        class whose representative (its first member) it verifies equal to in both directions
        (verify is not symmetric); otherwise it opens a new class.
        """
        return self.equivalence_classes_many([answers])[0]

    def equivalence_classes_many(self, groups: list[list[str | None]]) -> list[list[int | None]]:
        """`equivalence_classes` of each group, with one batch of math-verify calls for all of them.

        Every ordered pair of distinct strings within a group is decided up front, in parallel across the
        worker pool; then each group is classed in first-seen order as above. Deciding a new answer only
        against the classes found so far would need one round trip per distinct answer.
        """
        distinct = [list(dict.fromkeys(a for a in answers if a is not None)) for answers in groups]
        pairs = [[(i, j) for i in range(len(strings)) for j in range(len(strings)) if i != j] for strings in distinct]
        verdicts = iter(self._decide([strings[i] for strings, ps in zip(distinct, pairs) for i, _ in ps],
                                     [strings[j] for strings, ps in zip(distinct, pairs) for _, j in ps]))
        classes = []
        for answers, strings, group_pairs in zip(groups, distinct, pairs):
            equal = {pair: next(verdicts)[0] for pair in group_pairs}  # (gold index, pred index) -> verified
            representatives: list[int] = []  # index in `strings` of each class's first member
            class_of: dict[str, int] = {}
            for i, answer in enumerate(strings):
                match = next((c for c, rep in enumerate(representatives) if equal[rep, i] and equal[i, rep]), None)
                if match is None:
                    match = len(representatives)
                    representatives.append(i)
                class_of[answer] = match
            classes.append([None if a is None else class_of[a] for a in answers])
        return classes

    def _decide(self, golds: list[str], preds: list[str | None]) -> list[tuple[bool, bool]]:
        """(correct, timed_out) per pair: fast path, budget check, then math-verify on distinct pairs.

        Holds the lock throughout: one batch at a time owns the pool, the stats and math-verify's parser."""
        if len(golds) != len(preds):
            raise ValueError(f"{len(golds)} golds but {len(preds)} predictions")
        with self._lock:
            return self._decide_locked(golds, preds)

    def _decide_locked(self, golds: list[str], preds: list[str | None]) -> list[tuple[bool, bool]]:
        verdicts: list[tuple[bool, bool] | None] = [None] * len(golds)
        pending: dict[tuple[str, str], list[int]] = {}
        for i, (gold, pred) in enumerate(zip(golds, preds)):
            if gold is None or pred is None:
                verdicts[i] = (False, False)
            elif (fast := fast_decide(gold, pred)) is not None:
                verdicts[i] = (fast, False)
                self.stats.fast_path += 1
            elif over_budget(gold) or over_budget(pred):
                verdicts[i] = (False, True)
                self.stats.over_budget += 1
            else:
                pending.setdefault((gold, pred), []).append(i)
        pairs = list(pending)
        for pair, verdict in zip(pairs, self._math_verify(pairs)):
            for i in pending[pair]:
                verdicts[i] = verdict
        self.stats.comparisons += len(golds)
        return verdicts

    def _math_verify(self, pairs: list[tuple[str, str]]) -> list[tuple[bool, bool]]:
        if not pairs:
            return []
        self.stats.math_verify += len(pairs)
        if len(pairs) <= IN_PROCESS_MAX and all(is_simple(g) and is_simple(p) for g, p in pairs):
            return [(math_verify_equal(g, p), False) for g, p in pairs]
        pool = self._ensure_pool()
        try:
            verdicts = pool.run(pairs)
        except BaseException:  # e.g. Ctrl-C: answers still in flight would land in the next batch
            pool.close(kill=True)
            self._pool = None
            raise
        self.stats.timeouts += sum(timed_out for _, timed_out in verdicts)
        return verdicts

    def _ensure_pool(self) -> _Pool:
        if self._owner_pid != os.getpid():  # we were forked: the pool belongs to the parent
            self._pool, self._owner_pid = None, os.getpid()
        if self._pool is None:
            self._pool = _Pool(self.num_workers, self.timeout_s, self.stats)
        return self._pool


_shared: Verifier | None = None
_shared_lock = threading.Lock()


def get_verifier() -> Verifier:
    """The process-wide shared Verifier (default settings), closed at interpreter exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Verifier()
            atexit.register(_shared.close)
        return _shared


def is_equivalent(gold: str, pred: str) -> bool:
    """Does `pred` verify equal to `gold`? (the shared Verifier; for one-off checks)."""
    return get_verifier().equivalent([gold], [pred])[0]
