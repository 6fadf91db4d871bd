"""Majority votes over extracted answers, shared by majority voting and both Co-rewarding methods.

Two ways to decide that two answers are the same:
  * "verified" — math-verify equivalence classes (`1/2`, `0.5` and `\\frac{1}{2}` are one answer);
  * "exact"    — equal strings, as extracted, unstripped (what the Co-rewarding authors did: `ans == pseudo_label`
                 in co_reward.py and co_rewarding_II.py, their votes a `Counter` of the raw strings).
Empty (or whitespace-only) answers never vote. Ties go to the answer seen first (lowest row), so a vote is deterministic.

And two ways to read an answer (`Extract`): "default" — `verify.extract_answer` (last `\\boxed{}`, else
`####`, else "the answer is", cleaned); "boxed_raw" — the authors' raw last-`\\boxed{}` string
(`verify.extract.extract_boxed_raw`), which is what Co-rewarding and TTRL voted on.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Literal

from coreward.verify.extract import extract_answer, extract_boxed_raw


Match = Literal["verified", "exact"]
Extract = Literal["default", "boxed_raw"]


def extract(text: str, how: Extract) -> str | None:
    """One completion's answer, read the `how` way (see the module docstring)."""
    return extract_boxed_raw(text) if how == "boxed_raw" else extract_answer(text)


def _clean(answer: str | None, match: Match = "verified") -> str | None:
    """None for no answer or a blank one; "exact" keeps the string as it is (`\\boxed{ 3}` ≠ `\\boxed{3}`)."""
    if answer is None or not answer.strip():
        return None
    return answer if match == "exact" else answer.strip()


def answer_classes(groups: list[list[str | None]], match: Match, verifier: Any,
                   map_shards: Callable[[Callable, list], list] | None = None) -> list[list[int | None]]:
    """A class id per answer of each group (None for no answer); equal ids within a group mean the same answer.
    "verified" sends every group's pairs to math-verify in one batch, split across processes by group with
    `map_shards` (`RolloutBatch.map_shards`; None: all here)."""
    groups = [[_clean(a, match) for a in answers] for answers in groups]
    if match == "verified":
        classify = verifier.equivalence_classes_many
        return map_shards(classify, groups) if map_shards is not None else list(classify(groups))
    classes = []
    for answers in groups:
        ids: dict[str, int] = {}
        classes.append([None if a is None else ids.setdefault(a, len(ids)) for a in answers])
    return classes


Vote = tuple[str | None, list[int | None], int | None]  # majority answer, each answer's class, winning class


def majority_votes(groups: list[list[str | None]], match: Match, verifier: Any,
                   map_shards: Callable[[Callable, list], list] | None = None) -> list[Vote]:
    """For each group: the majority answer, every answer's class, and the winning class (None when nobody
    answered). `map_shards`: as for `answer_classes`."""
    votes = []
    for answers, classes in zip(groups, answer_classes(groups, match, verifier, map_shards)):
        counts = Counter(c for c in classes if c is not None)
        if not counts:
            votes.append((None, classes, None))
            continue
        top = max(counts.values())
        winner = next(c for c in classes if c is not None and counts[c] == top)  # first seen among the tied
        votes.append((_clean(answers[classes.index(winner)], match), classes, winner))
    return votes


def matches_label(label: str | None, answers: list[str | None], match: Match, verifier: Any) -> list[bool]:
    """Does each answer equal the pseudo label? (label first, as the gold is in verification)."""
    answers = [_clean(a, match) for a in answers]
    if label is None:
        return [False] * len(answers)
    if match == "exact":
        return [a == label for a in answers]
    present = [i for i, a in enumerate(answers) if a is not None]
    verdicts = verifier.equivalent([label] * len(present), [answers[i] for i in present]) if present else []
    result = [False] * len(answers)
    for i, ok in zip(present, verdicts):
        result[i] = ok
    return result


def label_accuracy(labels: list[str | None], references: list[str | None] | None, verifier: Any) -> float | None:
    """How often pseudo labels equal the true answers (None when there are no references)."""
    if references is None or not labels:
        return None
    pairs = [(r, l) for r, l in zip(references, labels) if r is not None]
    if not pairs:
        return None
    golds = [r for r, _ in pairs]
    preds = [l for _, l in pairs]
    return sum(verifier.equivalent(golds, preds)) / len(pairs)
