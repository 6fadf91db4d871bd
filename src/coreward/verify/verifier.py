"""The `Verifier`: one verdict per (completion, gold) for every caller (training rewards, evaluation,
majority votes, `coreward verify`).

    extract (extract.py) -> plan the comparisons (answers.py) -> decide each: exact arithmetic
    (arithmetic.py), refused when over the static budget (budget.py), else math-verify in a worker
    with a last-resort deadline (pool.py) -> combine.

A few comparisons of short, simple answers run in the calling process instead (no pool start, no IPC).
"""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass

from coreward.verify.answers import Check, checks_of, evaluate, plan
from coreward.verify.arithmetic import fast_decide
from coreward.verify.budget import is_simple, over_budget
from coreward.verify.extract import MAX_COMPLETION_CHARS, clip_completion, extract_answer, gold_answer
from coreward.verify.pool import WholeText, WorkerPool, default_workers, math_verify_equal


# The wall-clock deadline is a last resort: the static budget refuses what is known to be slow, and real
# answers take milliseconds (studies/2026-11-22-verifier-throughput/), so a verdict never depends on how loaded the
# machine is.
DEFAULT_TIMEOUT_S = 10.0
IN_PROCESS_MAX = 4  # at most this many simple comparisons run in the caller


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


def check_settings(timeout_s: float, num_workers: int | None, max_completion_chars: int | None) -> None:
    """ValueError naming the first unusable setting of a `Verifier` (configs check theirs with this too)."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if num_workers is not None and num_workers < 1:
        raise ValueError(f"num_workers must be >= 1 (or null: one per core), got {num_workers}")
    if max_completion_chars is not None and max_completion_chars < 1:
        raise ValueError(f"max_completion_chars must be >= 1 (or null: no limit), got {max_completion_chars}")


class Verifier:
    """Answer equivalence: extraction, then the comparisons `answers.plan` asks for, decided by exact
    arithmetic or math-verify within a static budget and a hard per-item deadline.

    A context manager; its worker pool starts on first need; safe to call from any thread (calls are
    serialized); `close()` stops the workers (a later call starts them again).
    """

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, num_workers: int | None = None,
                 max_completion_chars: int | None = MAX_COMPLETION_CHARS, *,
                 decimal_comma: bool = False, ordered_lists: bool = False):
        check_settings(timeout_s, num_workers, max_completion_chars)
        self.timeout_s = float(timeout_s)
        self.decimal_comma = decimal_comma  # `1000,99` is 1000.99 (see coreward.verify.answers)
        self.ordered_lists = ordered_lists  # `1, 2` differs from `2, 1`
        self.max_completion_chars = max_completion_chars
        self.num_workers = num_workers or default_workers()
        self.stats = VerifierStats()
        self._lock = threading.Lock()
        self._pool: WorkerPool | None = None
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

    def whole_text_equal(self, texts: list[str], answers: list[str]) -> list[tuple[bool, bool]]:
        """(equal, timed_out) per text: does math-verify's own parse of the whole text (a `\\boxed{}`, "final answer
        is", else its last number or formula) verify equal to `answer`? `verify(parse(text), parse(answer))`, the
        text first, as Cooper's authors check a negative against its positive (rewards/cooper/assistant.py `write_negatives`).

        The texts are untrusted: every one goes to the worker pool under the deadline (cut to `max_completion_chars`
        first), never to math-verify in the caller; a timeout is "not equal". An answer over the budget is not equal.
        """
        if len(texts) != len(answers):
            raise ValueError(f"{len(texts)} texts but {len(answers)} answers")
        items, slots = [], []
        for k, (text, answer) in enumerate(zip(texts, answers)):
            answer = gold_answer(answer)
            if isinstance(text, str) and text.strip() and answer is not None and not over_budget(answer):
                items.append(WholeText(clip_completion(text, self.max_completion_chars), answer))
                slots.append(k)
        verdicts = [(False, False)] * len(texts)
        if not items:
            return verdicts
        with self._lock:
            self.stats.math_verify += len(items)
            results = self._in_pool(items)
        for k, result in zip(slots, results):
            verdicts[k] = result
        return verdicts

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
        formulas = []
        for gold, pred in zip(golds, preds):
            gold = gold_answer(gold)
            if gold is None or not isinstance(pred, str) or not pred.strip():
                formulas.append(False)
            else:
                formulas.append(plan(gold, pred.strip(), self.decimal_comma, self.ordered_lists))
        checks = list(dict.fromkeys(check for formula in formulas for check in checks_of(formula)))
        decided, timed_out = self._decide_checks(checks)
        self.stats.comparisons += len(golds)
        verdicts = []
        for formula in formulas:
            correct = evaluate(formula, decided)
            verdicts.append((correct, not correct and any(c in timed_out for c in checks_of(formula))))
        return verdicts

    def _decide_checks(self, checks: list[Check]) -> tuple[dict[Check, bool], set[Check]]:
        """Each check's verdict: fast path, budget check, then math-verify; and the checks that ran out of
        budget or time (counted in `stats.over_budget` and `stats.timeouts`)."""
        decided: dict[Check, bool] = {}
        timed_out: set[Check] = set()
        pending: list[Check] = []
        for check in checks:
            fast = fast_decide(check.gold, check.pred) if check.rounding is None else None
            if fast is not None:
                decided[check] = fast
                self.stats.fast_path += 1
            elif over_budget(check.gold) or over_budget(check.pred):
                decided[check] = False
                timed_out.add(check)
                self.stats.over_budget += 1
            else:
                pending.append(check)
        for check, (correct, late) in zip(pending, self._math_verify([(c.gold, c.pred, c.rounding) for c in pending])):
            decided[check] = correct
            if late:
                timed_out.add(check)
        return decided, timed_out

    def _math_verify(self, items: list[tuple[str, str, int | None]]) -> list[tuple[bool, bool]]:
        if not items:
            return []
        self.stats.math_verify += len(items)
        if len(items) <= IN_PROCESS_MAX and all(is_simple(g) and is_simple(p) for g, p, _ in items):
            return [(math_verify_equal(*item), False) for item in items]
        return self._in_pool(items)

    def _in_pool(self, items: list) -> list[tuple[bool, bool]]:
        """(correct, timed_out) per item from the worker pool, under the deadline (timeouts counted)."""
        pool = self._ensure_pool()
        try:
            verdicts = pool.run(items)
        except BaseException:  # e.g. Ctrl-C: answers still in flight would land in the next batch
            pool.close(kill=True)
            self._pool = None
            raise
        self.stats.timeouts += sum(late for _, late in verdicts)
        return verdicts

    def _ensure_pool(self) -> WorkerPool:
        if self._owner_pid != os.getpid():  # we were forked: the pool belongs to the parent
            self._pool, self._owner_pid = None, os.getpid()
        if self._pool is None:
            self._pool = WorkerPool(self.num_workers, self.timeout_s, self.stats)
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
