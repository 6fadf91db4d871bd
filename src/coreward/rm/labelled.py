"""Labelled verification rows, the format `coreward rm train|eval|annotate` share: (question, reference_answer,
completion, label∈{0,1}). Reading them (errors name the file, the row, the column), splitting, balancing,
and the binary metrics of predictions against their labels:

    accuracy  = (TP + TN) / n
    precision = TP / (TP + FP)        0 when nothing is predicted positive
    recall    = TP / (TP + FN)        0 when there are no positives
    F1        = 2·P·R / (P + R)       0 when P + R = 0
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import Any

from coreward.runtime.errors import CorewardError


COLUMNS = ("question", "reference_answer", "completion", "label")
TEXT_COLUMNS = COLUMNS[:3]


def read_labelled(path: str | os.PathLike, limit: int | None = None, split: str = "train") -> list[dict[str, Any]]:
    """Rows (question, reference_answer, completion, label∈{0,1}) of a file (parquet, jsonl, json, csv), a
    directory (`split` of a dataset repository or save_to_disk folder) or a hub dataset id.

    Every problem (unreadable file, missing column, a label that is not 0/1) is a CorewardError naming
    the file, the row (1-based) and the column.
    """
    from coreward.data.sources import source_rows

    rows = source_rows(str(path), split)[0][:limit]  # a file, a directory or a hub dataset id, via datasets
    if not rows:
        raise CorewardError(f"{path}: no rows")
    return [_check_row(row, path, number) for number, row in enumerate(rows, start=1)]


def _check_row(row: dict, path, number: int) -> dict[str, Any]:
    for column in COLUMNS:
        if row.get(column) is None:
            raise CorewardError(f"{path}: row {number}: missing column {column!r} (need {', '.join(COLUMNS)})")
    label = row["label"]
    if isinstance(label, str) or label not in (0, 1):  # True/False and 0.0/1.0 pass; "1", 0.5, 2 do not
        raise CorewardError(f"{path}: row {number}: column 'label' must be 0 or 1, got {label!r}")
    return {**{c: str(row[c]) for c in TEXT_COLUMNS}, "label": int(label)}


def split_by_question(rows: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, held-out): a seeded `fraction` of the distinct questions goes to held-out, with all its rows.

    Splitting by question rather than by row keeps the held-out score honest: otherwise the RM would be
    tested on other completions of problems whose reference it already saw with labels.
    """
    questions = sorted({row["question"] for row in rows})
    random.Random(seed).shuffle(questions)
    held = set(questions[: max(1, round(fraction * len(questions)))])
    if len(held) == len(questions):
        raise CorewardError(f"cannot hold out questions: the training file has only {len(questions)} distinct")
    return [r for r in rows if r["question"] not in held], [r for r in rows if r["question"] in held]


def balance_classes(rows: list[dict], seed: int) -> list[dict]:
    """A seeded subsample of the majority class, as large as the minority class, plus the whole minority.

    With a policy that is right on a fifth of its samples, plain BCE sits at the base rate ("always wrong")
    for a long time; balanced classes make the RM look for features that separate them from the start.
    """
    positives = [r for r in rows if r["label"] == 1]
    negatives = [r for r in rows if r["label"] == 0]
    small, large = sorted((positives, negatives), key=len)
    kept = small + random.Random(seed).sample(large, len(small))
    random.Random(seed + 1).shuffle(kept)
    return kept


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
