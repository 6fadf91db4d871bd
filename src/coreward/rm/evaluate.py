"""How well a verifier agrees with labels: `coreward rm eval` (VerifyRMs, the rule verifier and an LLM judge,
side by side on the same labelled file; metrics in `labelled.binary_metrics`), and an RM's ranking of (correct,
wrong) pairs.

With a judge two columns come from one pass over the rows: the judge alone, and "hybrid" (the `judge` reward's
hybrid mode: the rule's verdict where it accepts, the judge's where it does not), which needs no extra request.

Precision is what a reward cares about most (a false positive is a reward for a wrong answer, the door
to hacking); recall is where the rule verifier is weak (a correct answer in a format it does not read).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coreward.rm.labelled import binary_metrics, read_labelled
from coreward.rm.model import VerifyRM
from coreward.runtime.distributed import distributed_map
from coreward.runtime.errors import CorewardError


RULE = "rule"


def rule_predictions(rows: list[dict], verifier=None) -> list[int]:
    """1 where the rule verifier finds the completion's final answer equal to the reference."""
    return [int(result.correct) for result in _rule_results(rows, verifier)]


def _rule_results(rows: list[dict], verifier=None) -> list:
    from coreward.verify import get_verifier

    verifier = verifier or get_verifier()
    return verifier.verify_completions([r["completion"] for r in rows], [r["reference_answer"] for r in rows])


def judge_predictions(rows: list[dict], judge, rule_results: list) -> tuple[list[int], list[int], int]:
    """The judge's predictions (a failed or unreadable verdict predicts 0), the hybrid's (the rule where it accepts,
    else the judge, asked about those rows only), and how many rows had no verdict."""
    verdicts = judge.judge([r["question"] for r in rows], [r["reference_answer"] for r in rows],
                           [r["completion"] for r in rows], [v.extracted for v in rule_results]).verdicts
    alone = [int(v == 1) for v in verdicts]
    hybrid = [1 if rule.correct else j for rule, j in zip(rule_results, alone)]
    return alone, hybrid, sum(v is None for v in verdicts)


def rm_scores(rows: list[dict], rm) -> list[float]:
    """The RM's probability σ(logit) that each row's completion is correct."""
    return rm.score([r["question"] for r in rows], [r["reference_answer"] for r in rows],
                    [r["completion"] for r in rows])


# rewards/ensemble.py's min and mean rules (`combine_scores`, a layer above rm/), for --combine
COMBINE = {"min": min, "mean": lambda scores: sum(scores) / len(scores)}


def check_combine(combine: str | None, scorers: Sequence[str]) -> None:
    """--combine needs one of COMBINE and two RMs or more among the scorers: said before any RM loads."""
    if combine is not None and (combine not in COMBINE or sum(s != RULE for s in scorers) < 2):
        raise CorewardError(f"--combine must be min or mean, with two RMs or more given by --rm (got {combine!r})")


@dataclass
class EvalReport:
    data: str
    results: dict[str, dict[str, float]]  # scorer name ("rule", an RM path, "judge", "hybrid") -> metrics
    judge_failures: int | None = None  # rows the judge gave no verdict on (None: no judge)

    def table(self) -> str:
        """Scorers as columns, metrics as rows: the side-by-side view. pair_acc: the ranking of a question's right
        completions above its wrong ones (`pair_accuracy`; "-" where the set has no question with both)."""
        names = list(self.results)
        width = max(12, *(len(n) for n in names))
        lines = [f"{'metric':<10}" + "".join(f"{n:>{width + 2}}" for n in names)]
        for metric in ("accuracy", "precision", "recall", "f1", "pair_acc", "n", "tp", "fp", "tn", "fn"):
            cells = []
            for name in names:
                value = self.results[name].get(metric)
                value = "-" if value is None else value
                cells.append(f"{value:>{width + 2}.4f}" if isinstance(value, float) else f"{value:>{width + 2}}")
            lines.append(f"{metric:<10}" + "".join(cells))
        return "\n".join(lines)


def evaluate_verifiers(data: str | Path, scorers: Sequence[str], threshold: float = 0.5, device: str = "auto",
                       batch_size: int = 64, limit: int | None = None, judge=None,
                       combine: str | None = None) -> EvalReport:
    """Metrics of each scorer on a labelled file. A scorer is "rule", "demo" (the demo RM) or an RM directory;
    `judge` (an `rm.judge.Judge`) adds the columns "judge" and "hybrid"; `combine` ("min" or "mean") a column of
    the RMs' scores combined per row, as the `model` reward's ensemble scores (two RMs at least). Each column's
    pair_acc ranks its scores (a verdict's 0/1: ties count half)."""
    check_combine(combine, scorers)
    rows = read_labelled(data, limit)
    labels = [r["label"] for r in rows]
    rule_results = _rule_results(rows) if RULE in scorers or judge is not None else None
    results, rm_columns = {}, []
    for name in scorers:
        if name == RULE:
            scores = [float(v.correct) for v in rule_results]
        else:
            scores = rm_scores(rows, VerifyRM.from_pretrained(name, device=device, batch_size=batch_size))
            rm_columns.append(scores)
        results[name] = _metrics(rows, labels, scores, threshold)
    if combine is not None:
        combined = [COMBINE[combine](row) for row in zip(*rm_columns)]
        results[f"{combine} of {len(rm_columns)}"] = _metrics(rows, labels, combined, threshold)
    failures = None
    if judge is not None:
        alone, hybrid, failures = judge_predictions(rows, judge, rule_results)
        results["judge"] = _metrics(rows, labels, [float(v) for v in alone], 0.5)
        results["hybrid"] = _metrics(rows, labels, [float(v) for v in hybrid], 0.5)
    return EvalReport(str(data), results, failures)


def _metrics(rows: list[dict], labels: list[int], scores: list[float], threshold: float) -> dict:
    """binary_metrics of the scores above `threshold`, and their pair accuracy (None: no question has both)."""
    return {**binary_metrics(labels, [int(s > threshold) for s in scores]), "pair_acc": pair_accuracy(rows, scores)}


# --------------------------------------------------------------------------- ranking pairs (Cooper's held-out check)


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


def score_unique(rm: VerifyRM, triples: list[tuple[str, str, str]]) -> list[float]:
    """σ(logit) per (question, reference, completion), each distinct triple scored once, split across processes.

    A group's rollouts repeat more and more as GRPO makes the policy confident; scoring a repeat again is waste.
    """
    if getattr(rm, "sharded", False):  # every process must make the same forward passes (rm/sharding.py)
        from coreward.rm.sharding import score_unique as lockstep_score_unique

        return lockstep_score_unique(rm, triples)
    unique = list(dict.fromkeys(triples))
    scores = distributed_map(lambda part: rm.score(*map(list, zip(*part))) if part else [], unique)
    by_triple = dict(zip(unique, scores))
    return [by_triple[t] for t in triples]


def evaluate_rm(rm: VerifyRM, rows: list[dict]) -> dict[str, float]:
    """rm/accuracy (σ > 0.5 against the labels, as `coreward rm eval`) and rm/pair_accuracy (ranking)."""
    scores = score_unique(rm, [(r["question"], r["reference_answer"], r["completion"]) for r in rows])
    metrics = {"rm/accuracy": binary_metrics([r["label"] for r in rows], [int(s > 0.5) for s in scores])["accuracy"]}
    ranked = pair_accuracy(rows, scores)
    if ranked is not None:
        metrics["rm/pair_accuracy"] = ranked
    return metrics


def rollout_pair_accuracy(correct: list[bool], scores: list[float], G: int) -> float | None:
    """How well the RM ranks the policy's *current* rollouts: P(s⁺ > s⁻) over (verified, rejected) rollouts of
    the same prompt (groups of G rows; non-finite scores left out). None when no group has both kinds.

    Held-out accuracy says how the RM does on the distribution it was built for; this says how it does on what
    the policy writes now, which is what a hacked RM gets wrong."""
    rows = [{"question": i // G, "reference_answer": "", "label": int(ok)} for i, ok in enumerate(correct)]
    kept = [(row, s) for row, s in zip(rows, scores) if math.isfinite(s)]
    return pair_accuracy([row for row, _ in kept], [s for _, s in kept])


def rollout_score_diagnostics(correct: list[bool], answers: list[str | None], scores: list[float],
                              G: int) -> dict[str, float | None]:
    """What the RM pays the policy's current rollouts, by the rule's verdict (groups of G rows per prompt):

        rm/accepted_score, rm/rejected_score   mean score of the rule-accepted / rule-rejected rollouts
        rm/dominant_wrong_score   mean score of the rollouts carrying their group's dominant wrong answer (the most
                                  common extracted answer among the group's rejected rollouts; a tie goes to the
                                  one met first; rejected rollouts without an answer carry none), over the groups
                                  that have one
        rm/dominant_wrong_share   the fraction of all rollouts that carry their group's dominant wrong answer

    Non-finite scores are left out of the means (the rollout still counts in the share); a mean over no rollout
    is None. A policy that collapses onto one wrong answer the RM pays well shows a share and a score that rise
    together while the accepted rollouts thin out."""
    accepted, rejected, dominant, carriers = [], [], [], 0
    for start in range(0, len(correct), G):
        rows = range(start, min(start + G, len(correct)))
        for i in rows:
            if math.isfinite(scores[i]):
                (accepted if correct[i] else rejected).append(scores[i])
        wrong = Counter(answers[i] for i in rows if not correct[i] and answers[i] is not None)
        if wrong:
            answer = wrong.most_common(1)[0][0]  # Counter keeps first-met order among equal counts
            carriers += wrong[answer]
            dominant += [scores[i] for i in rows if not correct[i] and answers[i] == answer and math.isfinite(scores[i])]

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return {"rm/accepted_score": mean(accepted), "rm/rejected_score": mean(rejected),
            "rm/dominant_wrong_score": mean(dominant),
            "rm/dominant_wrong_share": carriers / len(correct) if correct else None}
