"""Cooper: the policy and the reward model learn together (ZJU-REAL/Cooper, recipe/cooper).

Each training step, on the global batch of G rollouts o_1..o_G per prompt q (reference answer a):

    1. reward      r_i = σ(f_θ(q, a, o_i))                     θ = the RM *before* this step's update
    2. positive    o⁺ = first o_i the rule verifier accepts     ("hardest": the accepted o_i of lowest r_i)
                   no accepted o_i → no pair for q
    3. negative    o⁻ = assistant(q, o⁺): a plausible solution whose answer does not verify equal to o⁺'s;
                   asked again (at most `max_retries` times) while it does, or has no answer; else no pair
                   (variant, not the paper's: negative="rollout" takes o⁻ = the rejected o_i of highest r_i,
                   the policy's own wrong answer the RM likes most; no rejected o_i → no pair)
    4. RM update   L(θ) = mean over valid pairs of −log σ(f_θ(q, a, o⁺) − f_θ(q, a, o⁻))
                   one AdamW step (lr 1e-5, wd 0.01), gradient norm clipped to 1.0; a step whose norm is
                   not finite is skipped (and counted). The next step's rewards come from the new θ.

Why it resists reward hacking: the RM's negatives are made fresh from what the policy writes *now*,
rewritten to be wrong, so a kind of wrong completion the policy drifts toward soon shows up as a negative;
a static RM (`model`) never sees it. Positives are rule-verified, so they are precise.

Several processes: every process holds the whole batch (see `rewards/base.py`). Scoring is split with
`distributed_map`. The assistant is called once, on the main process, batched over all prompts, and its
negatives are broadcast, so every process has the same pairs. The RM update is data-parallel with one
result: each process backpropagates its share of the pairs, the gradients are summed across processes
(all-reduce), and every process applies the same clip and AdamW step to the same summed gradient. The
step is element-wise arithmetic on bitwise-identical inputs, so the RMs stay bitwise identical, even on
GPUs whose backward kernels are not deterministic (each pair's gradient is computed once and shared),
and the work is split instead of repeated on every process.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from coreward.data.synthetic import VERIFIABLE_FORMATS, demo_problems
from coreward.errors import CorewardError
from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.rm.assistant import Assistant, NegativeRequest, build_assistant, perturb
from coreward.training.distributed import (
    distributed_map,
    load_location,
    on_main_then_broadcast,
    shard_bounds,
    world,
)

logger = logging.getLogger(__name__)

POSITIVE_RULES = ("first", "hardest")
# "assistant": the paper's negative, written by the assistant from the positive. "rollout" (ours): the
# group's rejected rollout the RM scores highest. It follows the policy wherever it drifts, even to outputs
# no assistant would write, but a correct answer the rule verifier cannot read becomes a negative.
NEGATIVE_SOURCES = ("assistant", "rollout")
DEMO_EVAL_PROBLEMS = 200  # demo test problems in the held-out set: 200 (correct, wrong) pairs
RM_DIR, OPTIMIZER_FILE, STATE_FILE = "rm", "optimizer.pt", "cooper_state.json"


@dataclass
class Pair:
    question: str
    reference: str
    positive: str
    negative: str


# --------------------------------------------------------------------------- 2. positives


def select_positives(correct: list[bool], scores: list[float], G: int, rule: str = "first") -> list[int | None]:
    """Per group of G rows, the row of its positive, or None when the verifier accepted none of them."""
    positives = []
    for start in range(0, len(correct), G):
        accepted = [i for i in range(start, start + G) if correct[i]]
        if not accepted:
            positives.append(None)
        elif rule == "first":
            positives.append(accepted[0])
        else:  # "hardest": the accepted rollout the RM likes least (the first of equals; NaN scores last)
            positives.append(min(accepted, key=lambda i: (math.isnan(scores[i]), scores[i])))
    return positives


# --------------------------------------------------------------------------- 3. negatives


@dataclass
class Negatives:
    """What the assistant produced for one step: a negative per request (None: the pair is dropped)."""

    texts: list[str | None]
    failures: int = 0  # requests that came back empty-handed (endpoint down, timeout, nothing to perturb)
    rejected: int = 0  # texts refused because their answer still verified equal to the positive's, or had none
    latencies: list[float] = field(default_factory=list)


def request_seed(*parts: Any) -> int:
    """A stable 32-bit seed from its parts (Python's `hash` of a str changes between processes)."""
    return zlib.crc32(":".join(map(str, parts)).encode())


def write_negatives(assistant: Assistant, verifier, requests: list[NegativeRequest], max_retries: int) -> Negatives:
    """Ask for every negative at once; ask again, up to `max_retries` times, for those that came back right.

    A request that failed outright is not asked again here: the endpoint backend has already retried it
    with backoff under its deadline, so one dead server costs a step at most that deadline, once.
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
        verdicts = verifier.verify_completions([text for _, text in written], [requests[i].answer for i, _ in written])
        pending = []
        for (i, text), verdict in zip(written, verdicts):
            if verdict.correct or verdict.extracted is None:
                outcome.rejected += 1
                pending.append(i)
            else:
                outcome.texts[i] = text
    return outcome


# --------------------------------------------------------------------------- 4. the RM and its update


def pairwise_loss(s_pos: torch.Tensor, s_neg: torch.Tensor) -> torch.Tensor:
    """−log σ(s⁺ − s⁻) per pair (Bradley-Terry): small when the RM ranks the positive above the negative."""
    return -F.logsigmoid(s_pos - s_neg)


class RMLearner:
    """A VerifyRM with its own AdamW, trained on (positive, negative) pairs; identical on every process."""

    def __init__(self, rm, lr: float = 1e-5, weight_decay: float = 0.01, batch_size: int = 32,
                 max_grad_norm: float = 1.0):
        self.rm = rm
        self.batch_size = batch_size
        self.max_grad_norm = max_grad_norm
        self.parameters = [p for p in rm.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.parameters, lr=lr, weight_decay=weight_decay)
        self.updates = 0  # optimizer steps taken
        self.skipped = 0  # steps skipped for a non-finite gradient norm

    def update(self, pairs: list[Pair]) -> dict[str, float]:
        """One optimizer step on the mean pairwise loss of `pairs` (the same list on every process)."""
        if not pairs:
            return {}
        model = self.rm.model
        model.train()
        # sums over this process's share of the pairs: loss, σ(s⁺), σ(s⁻), s⁺ > s⁻
        sums = torch.zeros(4, dtype=torch.float64)
        rank, size = world()
        start, stop = shard_bounds(len(pairs), rank, size)
        chunk = max(1, self.batch_size // 2)  # a pair is two sequences
        for first in range(start, stop, chunk):
            part = pairs[first : min(first + chunk, stop)]
            logits = self.rm.logits([p.question for p in part] * 2, [p.reference for p in part] * 2,
                                    [p.positive for p in part] + [p.negative for p in part])
            s_pos, s_neg = logits[: len(part)], logits[len(part) :]
            losses = pairwise_loss(s_pos, s_neg)
            (losses.sum() / len(pairs)).backward()  # summed over chunks and processes: the mean over all pairs
            sums += torch.stack([losses.sum(), s_pos.sigmoid().sum(), s_neg.sigmoid().sum(),
                                 (s_pos > s_neg).sum()]).detach().double().cpu()
        if size > 1:
            sums = self._sum_across_processes(sums)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
            self.updates += 1
        else:
            self.skipped += 1
            logger.warning("cooper: RM gradient norm is %s, update skipped (%d so far)", grad_norm.item(), self.skipped)
        self.optimizer.zero_grad(set_to_none=True)
        model.eval()
        loss, pos, neg, ordered = (sums / len(pairs)).tolist()
        return {"rm/loss": loss, "rm/score_pos": pos, "rm/score_neg": neg, "rm/train_pair_accuracy": ordered,
                "rm/grad_norm": grad_norm.item(), "rm/skipped_updates": float(self.skipped)}

    def _sum_across_processes(self, sums: torch.Tensor) -> torch.Tensor:
        """All-reduce every gradient (a process without pairs contributes zeros) and the metric sums."""
        import torch.distributed as dist

        for p in self.parameters:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
        sums = sums.to(self.rm.device)
        dist.all_reduce(sums)
        return sums.cpu()

    def save(self, directory: Path) -> None:
        """Weights (HF format, atomic), optimizer state and counters."""
        self.rm.save(directory / RM_DIR)
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        (directory / STATE_FILE).write_text(json.dumps({"updates": self.updates, "skipped": self.skipped}))

    @classmethod
    def load(cls, directory: Path, device, **settings) -> RMLearner:
        """The learner `save` wrote: same weights, same optimizer moments and step counts."""
        from coreward.rm.model import VerifyRM

        learner = cls(VerifyRM.load(directory / RM_DIR, device=device, batch_size=settings["batch_size"]), **settings)
        learner.optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, map_location=load_location(learner.rm.device)))
        state = json.loads((directory / STATE_FILE).read_text())
        learner.updates, learner.skipped = state["updates"], state["skipped"]
        return learner


# --------------------------------------------------------------------------- 5. held-out RM accuracy


def demo_eval_rows(problems: int = DEMO_EVAL_PROBLEMS) -> list[dict]:
    """(correct, wrong) pairs on demo test problems: the worked solution, and its perturbation."""
    rows = []
    for i, problem in enumerate(demo_problems("test")[:problems]):
        correct = problem.solution(VERIFIABLE_FORMATS[i % len(VERIFIABLE_FORMATS)])
        wrong = perturb(correct, str(problem.answer), random.Random(i))
        for completion, label in ((correct, 1), (wrong, 0)):
            rows.append({"question": problem.question(), "reference_answer": str(problem.answer),
                         "completion": completion, "label": label})
    return rows


def load_eval_rows(spec: str) -> list[dict]:
    """"demo", or a labelled file (question, reference_answer, completion, label) as `coreward rm eval` reads."""
    if spec == "demo":
        return demo_eval_rows()
    from coreward.rm.train import read_labelled

    return read_labelled(spec)


def pair_accuracy(rows: list[dict], scores: list[float]) -> float | None:
    """P(s⁺ > s⁻) over every (correct, wrong) combination of the same question and reference (ties: ½)."""
    by_question: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for row, score in zip(rows, scores):
        by_question.setdefault((row["question"], row["reference_answer"]), ([], []))[1 - row["label"]].append(score)
    wins = total = 0.0
    for correct, wrong in by_question.values():
        for s_pos in correct:
            for s_neg in wrong:
                wins += 1.0 if s_pos > s_neg else 0.5 if s_pos == s_neg else 0.0
                total += 1
    return wins / total if total else None


def score_unique(rm, triples: list[tuple[str, str, str]]) -> list[float]:
    """σ(logit) per (question, reference, completion), each distinct triple scored once, split across processes.

    A group's rollouts repeat more and more as GRPO makes the policy confident; scoring a repeat again is waste.
    """
    unique = list(dict.fromkeys(triples))
    scores = distributed_map(lambda part: rm.score(*map(list, zip(*part))) if part else [], unique)
    by_triple = dict(zip(unique, scores))
    return [by_triple[t] for t in triples]


def evaluate_rm(rm, rows: list[dict]) -> dict[str, float]:
    """rm/accuracy (σ > 0.5 against the labels, as `coreward rm eval`) and rm/pair_accuracy (ranking)."""
    from coreward.rm.evaluate import binary_metrics

    scores = score_unique(rm, [(r["question"], r["reference_answer"], r["completion"]) for r in rows])
    metrics = {"rm/accuracy": binary_metrics([r["label"] for r in rows], [int(s > 0.5) for s in scores])["accuracy"]}
    ranked = pair_accuracy(rows, scores)
    if ranked is not None:
        metrics["rm/pair_accuracy"] = ranked
    return metrics


# --------------------------------------------------------------------------- the reward source


@register("cooper")
class CooperReward(RewardSource):
    """σ(RM logit) as the reward, and the RM updated every step on (verified positive, assistant negative) pairs.

    rm: an RM directory, or "demo". assistant: "perturb", an endpoint `http://host:port/v1#model`, a local
    model path, or a `coreward.llm` generator dict. positive: "first" (the authors') or "hardest".
    negative: "assistant" (the authors') or "rollout" (the group's rejected rollout the RM scores highest).
    eval_every: held-out RM accuracy every K steps (0: never) on eval_data ("demo" or a labelled file).
    """

    needs_references = True

    def __init__(
        self,
        rm: str = "demo",
        assistant: str | dict | Assistant = "perturb",
        positive: str = "first",
        negative: str = "assistant",
        lr: float = 1e-5,
        weight_decay: float = 0.01,
        max_retries: int = 3,
        eval_every: int = 0,
        eval_data: str | None = None,
        batch_size: int = 32,
        device: str = "auto",
        seed: int = 0,
    ):
        lr, weight_decay = _typed(float, "lr", lr), _typed(float, "weight_decay", weight_decay)
        max_retries, eval_every = _typed(int, "max_retries", max_retries), _typed(int, "eval_every", eval_every)
        batch_size = _typed(int, "batch_size", batch_size)
        check_params(rm, assistant, positive, lr, weight_decay, max_retries, eval_every, eval_data, batch_size)
        if negative not in NEGATIVE_SOURCES:
            raise CorewardError(f"reward 'cooper': parameter negative must be one of {', '.join(NEGATIVE_SOURCES)}, "
                                f"got {negative!r}")
        self.negative = negative
        self.rm_path = rm
        self.assistant_spec = assistant
        self.positive = positive
        self.learner_settings = {"lr": lr, "weight_decay": weight_decay, "batch_size": batch_size}
        self.max_retries = max_retries
        self.eval_every = eval_every
        self.eval_data = eval_data
        self.device = device
        self.seed = seed
        self.learner: RMLearner | None = None
        self._assistant: Assistant | None = None
        self._resume_from: Path | None = None
        self._eval_rows: list[dict] | None = None

    # -- lazily built parts ---------------------------------------------------------------------------

    def get_learner(self, trainer=None) -> RMLearner:
        """The RM and its optimizer, on the trainer's device: from the checkpoint when resuming, else from `rm`."""
        if self.learner is None:
            from coreward.rm.model import load_rm

            device = trainer.accelerator.device if self.device == "auto" and trainer is not None else self.device
            if self._resume_from is not None:
                self.learner = RMLearner.load(self._resume_from, device, **self.learner_settings)
            else:
                rm = load_rm(self.rm_path, device=device, batch_size=self.learner_settings["batch_size"])
                self.learner = RMLearner(rm, **self.learner_settings)
        return self.learner

    def get_assistant(self) -> Assistant:
        """Built on first use, on the main process only (the other processes never call it)."""
        if self._assistant is None:
            self._assistant = build_assistant(self.assistant_spec)
        return self._assistant

    # -- one step -------------------------------------------------------------------------------------

    def compute(self, batch: RolloutBatch) -> list[float]:
        questions, references = batch.columns.get("question"), batch.references
        if questions is None or references is None:
            raise CorewardError(
                f"reward 'cooper' needs the dataset columns 'question' and {batch.reference_column!r} "
                "(the question and its reference answer)"
            )
        learner = self.get_learner(batch.context.get("trainer"))
        rm = learner.rm
        triples = list(zip((str(q) for q in questions), (r or "" for r in references), batch.completions))
        scores = score_unique(rm, triples)
        # a NaN/inf logit scores NaN (see VerifyRM.score): the trainer skips that completion and counts it
        batch.log("rm/nonfinite_logits", float(sum(not math.isfinite(s) for s in scores)))
        if batch.context.get("mode", "train") != "train":
            return scores  # evaluation batches score, they don't teach the RM
        if self.eval_every and batch.step % self.eval_every == 0:  # the RM that scored this step
            if self._eval_rows is None:
                self._eval_rows = load_eval_rows(self.eval_data)
            for name, value in evaluate_rm(rm, self._eval_rows).items():
                batch.log(name, value)
        pairs = self.make_pairs(batch, scores)
        start = time.perf_counter()
        for name, value in learner.update(pairs).items():
            batch.log(name, value)
        batch.log("time/rm_update", time.perf_counter() - start)
        return scores

    def make_pairs(self, batch: RolloutBatch, scores: list[float]) -> list[Pair]:
        """Steps 2 and 3: a verified positive per prompt and its negative (the assistant's, or a rejected rollout)."""
        verdicts = batch.verdicts()
        rows = select_positives([v.correct for v in verdicts], scores, batch.num_generations, self.positive)
        chosen = [(group, row) for group, row in enumerate(rows) if row is not None]
        if self.negative == "rollout":
            pairs = self._rollout_pairs(batch, scores, [v.correct for v in verdicts], chosen)
        else:
            pairs = self._assistant_pairs(batch, verdicts, chosen)
        batch.log("rm/positive_rate", len(chosen) / len(rows))
        batch.log("rm/valid_pair_rate", len(pairs) / len(rows))
        return pairs

    def _assistant_pairs(self, batch: RolloutBatch, verdicts, chosen: list[tuple[int, int]]) -> list[Pair]:
        """negative="assistant" (the authors'): the assistant writes a wrong solution from each positive."""
        questions = batch.columns["question"]
        requests = [
            NegativeRequest(str(questions[row]), batch.completions[row], verdicts[row].extracted,
                            request_seed(self.seed, batch.step, group))
            for group, row in chosen
        ]
        start = time.perf_counter()
        verifier = batch.context["verifier"]
        negatives = on_main_then_broadcast(
            lambda: write_negatives(self.get_assistant(), verifier, requests, self.max_retries) if requests else Negatives([])
        )
        batch.log("time/assistant", time.perf_counter() - start)
        pairs = [
            Pair(request.question, batch.references[row], request.positive, negative)
            for (_, row), request, negative in zip(chosen, requests, negatives.texts)
            if negative is not None
        ]
        batch.log("assistant/failures", float(negatives.failures))
        batch.log("assistant/rejected", float(negatives.rejected))
        if negatives.latencies:
            batch.log("assistant/latency", sum(negatives.latencies) / len(negatives.latencies))
        if requests and negatives.failures == len(requests):
            logger.warning("cooper: every assistant request of step %d failed; its pairs are dropped", batch.step)
        return pairs

    def _rollout_pairs(self, batch: RolloutBatch, scores: list[float], correct: list[bool],
                       chosen: list[tuple[int, int]]) -> list[Pair]:
        """negative="rollout": each positive's negative is its group's rejected rollout with the highest score."""
        G, pairs = batch.num_generations, []
        for group, row in chosen:
            rejected = [i for i in range(group * G, group * G + G) if not correct[i] and math.isfinite(scores[i])]
            if rejected:
                worst = max(rejected, key=lambda i: scores[i])  # the wrong answer the RM is most fooled by
                pairs.append(Pair(str(batch.columns["question"][row]), batch.references[row],
                                  batch.completions[row], batch.completions[worst]))
        return pairs

    # -- checkpoints ----------------------------------------------------------------------------------

    def save_state(self, directory: Path) -> None:
        if self.learner is not None:
            self.learner.save(Path(directory))

    def load_state(self, directory: Path) -> None:
        """Remember the checkpoint: the RM is loaded from it on first use, on the trainer's device."""
        if (Path(directory) / STATE_FILE).is_file():
            self._resume_from = Path(directory)
            self.learner = None

    def close(self) -> None:
        if self._assistant is not None:
            self._assistant.close()
            self._assistant = None


def _typed(expected: type, name: str, value: Any) -> Any:
    """`value` as `expected` (YAML reads 1e-5 as a string); a CorewardError naming the parameter otherwise."""
    from coreward.config import check_type

    return check_type(expected, value, f"params.{name}", "reward 'cooper'")


def check_params(rm, assistant, positive, lr, weight_decay, max_retries, eval_every, eval_data, batch_size) -> None:
    """Bad settings fail at config time, naming the parameter, before any model loads."""

    def bad(name: str, why: str) -> CorewardError:
        return CorewardError(f"reward 'cooper': parameter {name} {why}")

    if not isinstance(rm, str) or not rm:
        raise bad("rm", f"must be an RM directory, a hub id or 'demo', got {rm!r}")
    if not isinstance(assistant, (str, dict, Assistant)) or not assistant:
        raise bad("assistant", f"must be 'perturb', an endpoint URL, a model path or a generator dict, got {assistant!r}")
    if positive not in POSITIVE_RULES:
        raise bad("positive", f"must be one of {', '.join(POSITIVE_RULES)}, got {positive!r}")
    if not lr > 0:
        raise bad("lr", f"must be > 0, got {lr}")
    if not weight_decay >= 0:
        raise bad("weight_decay", f"must be >= 0, got {weight_decay}")
    if max_retries < 0:
        raise bad("max_retries", f"must be >= 0, got {max_retries}")
    if eval_every < 0:
        raise bad("eval_every", f"must be >= 0 (0: never), got {eval_every}")
    if eval_every and eval_data is None:
        raise bad("eval_data", "is needed with eval_every > 0: 'demo' or a labelled file")
    if eval_data not in (None, "demo") and not Path(eval_data).is_file():
        raise bad("eval_data", f"names no file: {eval_data}")
    if batch_size < 2:
        raise bad("batch_size", f"must be >= 2 (a pair is two sequences), got {batch_size}")
