"""`coreward rm eval`: how well a verifier (a VerifyRM, the rule verifier, or several) agrees with labels.

For predictions ŷ and labels y over n rows (positive = "the completion is correct"):

    accuracy  = (TP + TN) / n
    precision = TP / (TP + FP)        0 when nothing is predicted positive
    recall    = TP / (TP + FN)        0 when there are no positives
    F1        = 2·P·R / (P + R)       0 when P + R = 0

Precision is what a reward cares about most (a false positive is a reward for a wrong answer, the door
to hacking); recall is where the rule verifier is weak (a correct answer in a format it does not read).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from pathlib import Path

RULE = "rule"


def binary_metrics(labels: Sequence[int], predictions: Sequence[int]) -> dict[str, float]:
    """Accuracy, precision, recall, F1 and the confusion counts of 0/1 predictions against 0/1 labels."""
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    pairs = list(zip((int(y) for y in labels), (int(p) for p in predictions)))
    tp = sum(y == 1 and p == 1 for y, p in pairs)
    fp = sum(y == 0 and p == 1 for y, p in pairs)
    fn = sum(y == 1 and p == 0 for y, p in pairs)
    tn = len(pairs) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {
        "accuracy": (tp + tn) / len(pairs) if pairs else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "n": len(pairs),
        "tp": tp,
        "fp": fp,
        "tn": tn,
        "fn": fn,
    }


def rule_predictions(rows: list[dict], verifier=None) -> list[int]:
    """1 where the rule verifier finds the completion's final answer equal to the reference."""
    from coreward.verify import get_verifier

    verifier = verifier or get_verifier()
    results = verifier.verify_completions([r["completion"] for r in rows], [r["reference_answer"] for r in rows])
    return [int(result.correct) for result in results]


def rm_predictions(rows: list[dict], rm, threshold: float = 0.5) -> list[int]:
    """1 where the RM's probability exceeds `threshold`."""
    scores = rm.score([r["question"] for r in rows], [r["reference_answer"] for r in rows],
                      [r["completion"] for r in rows])
    return [int(s > threshold) for s in scores]


@dataclass
class EvalReport:
    data: str
    results: dict[str, dict[str, float]]  # scorer name ("rule" or an RM path) -> metrics

    def table(self) -> str:
        """Scorers as columns, metrics as rows: the side-by-side view."""
        names = list(self.results)
        width = max(12, *(len(n) for n in names))
        lines = [f"{'metric':<10}" + "".join(f"{n:>{width + 2}}" for n in names)]
        for metric in ("accuracy", "precision", "recall", "f1", "n", "tp", "fp", "tn", "fn"):
            cells = []
            for name in names:
                value = self.results[name][metric]
                cells.append(f"{value:>{width + 2}.4f}" if isinstance(value, float) else f"{value:>{width + 2}}")
            lines.append(f"{metric:<10}" + "".join(cells))
        return "\n".join(lines)


def evaluate_verifiers(data: str | Path, scorers: Sequence[str], threshold: float = 0.5, device: str = "auto",
                       batch_size: int = 64, limit: int | None = None) -> EvalReport:
    """Metrics of each scorer on a labelled file. A scorer is "rule", "demo" (the demo RM) or an RM directory."""
    from coreward.rm.train import read_labelled

    rows = read_labelled(data, limit)
    labels = [r["label"] for r in rows]
    results = {}
    for name in scorers:
        predictions = rule_predictions(rows) if name == RULE else rm_predictions(rows, _load_rm(name, device, batch_size),
                                                                                  threshold)
        results[name] = binary_metrics(labels, predictions)
    return EvalReport(str(data), results)


def _load_rm(name: str, device: str, batch_size: int):
    from coreward.rm.model import load_rm

    return load_rm(name, device=device, batch_size=batch_size)
