"""math-verify itself, and the worker processes that run it under a hard per-item deadline.

math-verify's own timeout uses SIGALRM, which fails outside the main thread. So comparisons go to worker
processes in chunks. A worker runs each item under SIGALRM (`timeout_s`; workers run in their own main
thread); if it still hasn't answered `KILL_GRACE_S` later (work in C that ignores signals), the
supervisor kills it, counts the item as timed out, starts a replacement and resubmits the rest of the
chunk. A batch therefore never hangs, and slow items occupy one worker each while the others carry on.
The deadline is a last resort: `budget.over_budget` refuses what is known to be slow before any call.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing
import signal
import time
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing.connection import wait
from typing import NamedTuple

from coreward.runtime import forkserver
from coreward.runtime.devices import usable_cores


KILL_GRACE_S = 0.5  # a worker silent for timeout_s + this long is killed
# Items cost milliseconds each (studies/2026-11-22-verifier-throughput/): small chunks balance the workers, and the
# IPC per chunk costs less.
CHUNKS_PER_WORKER = 8
CHUNK_MAX = 32

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


def math_verify_equal(gold: str, pred: str, float_rounding: int | None = None) -> bool:
    """`verify(parse(gold), parse(pred))`, gold first, no timeout, no fast path. `float_rounding`: compare
    numbers rounded to that many decimals (for `\\approx 0.577`); None: math-verify's default.

    Only for trusted or simple input (it can run for seconds); `Verifier` is the safe entry point."""
    options = {} if float_rounding is None else {"float_rounding": float_rounding}
    try:
        return bool(_math_verify().verify(_parse(gold), _parse(pred), timeout_seconds=None, **options))
    except Exception:  # noqa: BLE001 - math-verify's own policy: an error is "not equal"
        return False


class WholeText(NamedTuple):
    """A pool item compared by `math_verify_text_equal` (a plain (gold, pred[, rounding]) tuple goes to
    `math_verify_equal`)."""

    text: str
    answer: str


def math_verify_text_equal(text: str, answer: str) -> bool:
    """`verify(parse(text), parse(answer))` with math-verify's own extraction over the whole `text`: it reads a
    `\\boxed{}`, a "final answer is", and else the last number or formula of the text (`... 8-1=7.` reads 7).
    This is how Cooper's authors check a negative against its positive (collaborate.py), also where coreward's
    extraction reads no answer. Untrusted text: only in a worker under the deadline (`Verifier.whole_text_equal`)."""
    math_verify = _math_verify()
    try:
        return bool(math_verify.verify(math_verify.parse(text, parsing_timeout=None), _parse(answer), timeout_seconds=None))
    except Exception:  # noqa: BLE001 - math-verify's own policy: an error is "not equal"
        return False


class _Deadline(BaseException):
    """Raised by SIGALRM in a worker. A BaseException, so math-verify's `except Exception` can't swallow it."""


def _on_alarm(signum, frame):
    raise _Deadline


def _worker_main(conn, timeout_s: float) -> None:
    """Worker loop: receive a chunk of (gold, pred, float_rounding) or `WholeText` items, send back one
    (correct, timed_out) per item as it finishes (so the supervisor knows which item is running and since when)."""
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
        for item in chunk:
            conn.send(_compare_under_alarm(item, timeout_s))


def _compare_under_alarm(item: tuple, timeout_s: float) -> tuple[bool, bool]:
    """(correct, timed_out) for one item under SIGALRM; the outer `try` also catches an alarm that
    fires while the inner `finally` is disarming it."""
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            return (math_verify_text_equal(*item) if isinstance(item, WholeText) else math_verify_equal(*item)), False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Deadline:
        return False, True


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    ready: bool = False
    chunk: deque | None = None  # (slot, item) items sent and not yet answered
    since: float = 0.0  # when the item now running started (the last answer or the dispatch)


class WorkerPool:
    """Worker processes plus the supervision loop that enforces the per-item deadline."""

    def __init__(self, size: int, timeout_s: float, stats):
        self.timeout_s = timeout_s
        self._stats = stats
        self._ctx = _mp_context()
        self._workers = [self._spawn() for _ in range(size)]

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, args=(child_conn, self.timeout_s), daemon=True)
        with forkserver.main_module_hidden():
            process.start()
        child_conn.close()
        return _Worker(process, parent_conn)

    def run(self, pairs: list[tuple]) -> list[tuple[bool, bool]]:
        """(correct, timed_out) for each pair, in order."""
        results: list[tuple[bool, bool] | None] = [None] * len(pairs)
        size = max(1, min(CHUNK_MAX, math.ceil(len(pairs) / (CHUNKS_PER_WORKER * len(self._workers)))))
        items = list(enumerate(pairs))
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
        worker.conn.send([item for _, item in chunk])
        worker.chunk, worker.since = chunk, time.monotonic()

    def _receive(self, worker: _Worker, results: list, queue: deque) -> None:
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                if message == "ready":
                    worker.ready = True
                else:
                    slot, _ = worker.chunk.popleft()
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
            slot, _ = worker.chunk.popleft()
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
    return forkserver.context("math_verify", __name__)


def default_workers() -> int:
    return max(1, min(8, usable_cores()))
