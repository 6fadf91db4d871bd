"""Generative verifier ("LLM as a judge"): an LLM says whether a rollout's answer matches the reference.

    mode="judge"   r_i = correct  if J(q, a, o_i) = 1  else incorrect
    mode="hybrid"  r_i = correct  if verify(a, extract(o_i))          the rule accepts: no judge call
                   r_i = correct  if J(q, a, o_i) = 1  else incorrect  the rule rejects, or reads no answer

J is the judge LLM's verdict (rm/judge.py): the prompt of a published verifier (xVerify, CompassVerifier, TIGER-Lab's
general-verifier; xVerify's and general-verifier's read from the user's `template` file, as their licences keep them
out of coreward) or coreward's plain one, shown the question, the reference and the rollout's final answer (or the
rollout itself). Before step 0 (`preflight`) the template reads, an endpoint answers and a local model's files load. A request that fails after the endpoint's retries and deadline, or a reply that says neither,
scores `incorrect` (`on_failure: skip`: NaN, the engine leaves the rollout out of its group and counts it).

Hybrid is Cooper's hybrid annotation (rm/annotate.py) at reward time: the rule verifier is precise where it reads
an answer, and the judge is asked only where it says no, which is where its errors are (a right answer in a format
it cannot read; the demo's `ans 14`). A judge that accepts a wrong answer still pays the policy for it there: the
judge is a model, and can be hacked as a reward model can.

Each step the distinct prompts are asked once (the endpoint's concurrency, retries and deadline; a local model's
batches), on the main process, and the verdicts broadcast to every process. Logged per step: judge/calls (requests
sent), judge/judged (rollouts that needed a verdict), judge/failures (failed or unreadable), judge/accept_rate,
judge/agreement (with the rule verifier, on the rollouts the judge gave a verdict on), judge/overturned (rejected
by the rule, accepted by the judge), judge/latency and time/judge.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Literal

from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.rewards.health import Check, HealthWatch
from coreward.rewards.memory import MemoryNeeds, PlannedRun, judge_request_tokens, local_llm_items
from coreward.rm.inputs import user_message
from coreward.rm.judge import Judge, Verdicts
from coreward.runtime.distributed import on_main_then_broadcast


logger = logging.getLogger(__name__)


@register("judge")
class JudgeReward(RewardSource):
    label = "Generative verifier (LLM judge)"
    table_order = 2
    needs_references = True
    in_demo = False  # it needs a judge LLM, which the CPU demo has not

    @dataclass
    class Params:
        judge: Any = None  # the judge LLM: an endpoint `http://host:port/v1#model`, a local model path or hub id, or a `coreward.llm` generator dict (concurrency, timeouts, retries, deadline)
        format: Literal["plain", "xverify", "compassverifier", "compassverifier_cot", "general_verifier"] = "plain"  # the prompt and verdict format: coreward's YES/NO, or a published verifier's own (rm/judge.py)
        mode: Literal["judge", "hybrid"] = "judge"  # ask the judge about every rollout, or only where the rule verifier rejects or reads no answer
        shows: Literal["auto", "answer", "completion"] = "auto"  # the candidate the judge reads: the extracted final answer (the completion where none is), the completion, or the format's own choice
        max_chars: int = 4000  # a completion shown to the judge keeps its last max_chars characters
        max_tokens: int | None = None  # the reply's token budget (None: the format's own)
        temperature: float = 0.0  # the judge's sampling temperature (0: greedy)
        correct: float = 1.0  # reward of a rollout the judge (or, in hybrid mode, the rule) accepts
        incorrect: float = 0.0  # reward of a rollout judged wrong
        on_failure: Literal["incorrect", "skip"] = "incorrect"  # a failed request or unreadable verdict: score it incorrect, or skip the rollout (NaN: counted)
        question_field: Literal["question", "prompt"] = "question"  # what the judge reads as the question: the dataset's question, or the prompt's whole user message
        template: str | None = None  # a file holding the format's prompt: needed for xverify and general_verifier, whose authors' licences keep their prompts out of coreward (their repository's file, or a text file); for the others, a replacement of coreward's copy

        def validate(self) -> None:
            if not self.judge or not isinstance(self.judge, (str, dict)):
                raise ValueError("judge must name the judge LLM: an endpoint URL `http://host:port/v1#model`, a local "
                                 f"model path or hub id, or a generator dict, got {self.judge!r}")
            for name in ("max_chars", "max_tokens"):
                if getattr(self, name) is not None and getattr(self, name) < 1:
                    raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
            if self.temperature < 0:
                raise ValueError(f"temperature must be >= 0, got {self.temperature}")

    @classmethod
    def memory_needs(cls, params: Params, run: PlannedRun) -> MemoryNeeds:
        """A local judge LLM's weights and a generation's cache on the training device; an endpoint's are elsewhere."""
        return MemoryNeeds(local_llm_items(run, params.judge, "judge", "judge",
                                           judge_request_tokens(run, params.format, params.max_tokens, params.template)))

    def __init__(self, **params):
        super().__init__(**params)
        p = self.params
        self.judge = Judge(p.judge, p.format, p.shows, p.max_chars, p.max_tokens, p.temperature, p.template)

    def preflight(self, key: str | None = None, template_key: str | None = None) -> None:
        """Before training starts: the prompt template reads, an endpoint judge answers (down, every rollout would
        score `incorrect`), a local one's files load. Errors name the setting: `key` (default
        `rewards.N.params.judge`) and `template_key` (beside it) when another reward holds this one (Cooper)."""
        where = f"reward {self.name!r}: key {self.config_key}.params"
        self.judge.key = key or f"{where}.judge"
        self.judge.template_key = template_key or f"{where}.template"
        self.judge.check()

    def compute(self, batch: RolloutBatch) -> list[float]:
        p = self.params
        (references,) = batch.require_columns(self.name, "reference")
        questions = ([user_message(prompt) for prompt in batch.prompts] if p.question_field == "prompt"
                     else [str(q) for q in batch.require_columns(self.name, "question")[0]])
        rule = [v.correct for v in batch.verdicts()]  # every process: the verdicts are computed collectively
        answers = [v.extracted for v in batch.verdicts()]

        # the rows the judge is asked about: all of them, or (hybrid) those the rule does not accept
        asked = [i for i in range(len(batch)) if p.mode == "judge" or not rule[i]]
        start = time.perf_counter()
        replies: Verdicts = on_main_then_broadcast(lambda: self.judge.judge(
            [questions[i] for i in asked], [references[i] or "" for i in asked],
            [batch.completions[i] for i in asked], [answers[i] for i in asked]))
        verdict: dict[int, int | None] = dict(zip(asked, replies.verdicts))

        rewards = []
        for i in range(len(batch)):
            accepted = rule[i] if i not in verdict else verdict[i]
            if accepted is None:  # the judge failed on this rollout
                rewards.append(math.nan if p.on_failure == "skip" else p.incorrect)
            else:
                rewards.append(p.correct if accepted else p.incorrect)
        self._log(batch, asked, replies, rule, time.perf_counter() - start)
        return rewards

    def _log(self, batch: RolloutBatch, asked: list[int], replies: Verdicts, rule: list[bool], seconds: float) -> None:
        given = [(rule[i], v) for i, v in zip(asked, replies.verdicts) if v is not None]
        batch.log("judge/calls", float(replies.calls))
        batch.log("judge/judged", float(len(asked)))
        batch.log("judge/failures", float(replies.failed + replies.unreadable))
        if given:
            batch.log("judge/accept_rate", sum(v for _, v in given) / len(given))
            batch.log("judge/agreement", sum(int(r) == v for r, v in given) / len(given))
            batch.log("judge/overturned", float(sum(not r and v == 1 for r, v in given)))
        if replies.latencies:
            batch.log("judge/latency", sum(replies.latencies) / len(replies.latencies))
        batch.log("time/judge", seconds)
        if asked and replies.failed + replies.unreadable == replies.calls:
            # batch.step counts the steps done before this one; metrics.jsonl numbers this step batch.step + 1
            logger.warning("judge: no verdict in step %d (%d requests failed, %d replies unreadable; last: %s); its "
                           "judged rollouts score %s", batch.step + 1, replies.failed, replies.unreadable,
                           replies.last_error or "none given", self.params.on_failure)

    def health_watches(self) -> list[HealthWatch]:
        return [JudgeWatch()]

    def close(self) -> None:
        self.judge.close()


class JudgeWatch(HealthWatch):
    """A step on which every request failed or came back unreadable (`judge/failures` = `judge/calls` > 0: its
    judged rollouts scored as `on_failure` says), warned at once."""

    def __init__(self):
        self.steps = 0

    def check(self, logs: dict[str, Any], step: int) -> list[Check]:
        if "judge/calls" not in logs:
            return []
        self.steps += 1
        calls, failures = logs["judge/calls"], logs.get("judge/failures", 0.0)
        return [Check("judge_silent", calls > 0 and failures >= calls, lambda: (
            f"the LLM judge gave no verdict ({failures:.0f} of {calls:.0f} requests failed or came back unreadable): "
            "its judged rollouts scored as its `on_failure` says; the judge's warnings above give the error"),
            at_once=True)]

    def report(self, broken: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
        lines = [f"LLM judge: steps with no verdict at all (every request failed or unreadable): "
                 f"{broken.get('judge_silent', 0)} of {self.steps}"] if self.steps else []
        return {"judge_steps": self.steps}, lines
