"""`coreward rm annotate`: hybrid annotation of a policy's own samples into a VerifyRM training set.

For each problem with a reference answer, sample K completions from the policy, then label each:

    rule(c)  = 1[verify(ref, extract(c))]                        (math-verify; no readable answer -> 0)
    judge(c) = 1[the LLM judge says the final answer matches ref] (optional)
    keep c with label rule(c)   iff  judge(c) is None-free and judge(c) == rule(c)

Keeping only agreements is Cooper's recipe: each labeller's typical errors (math-verify's unread
formats and false equalities, the judge's sloppiness) are mostly dropped rather than learnt. Without
a judge the rule verifier labels alone, and the output says so in every row (`labelled_by`) and in the
report: its false negatives (a correct answer in a format it cannot read) then become training negatives.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coreward.runtime.errors import CorewardError


JUDGE_PROMPT = (
    "You are checking a solution to a math problem against the reference answer.\n\n"
    "Problem: {question}\n\nReference answer: {reference}\n\nSolution: {completion}\n\n"
    "Is the final answer of the solution equivalent to the reference answer? Reply with one word: YES or NO."
)
_VERDICT = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


@dataclass
class AnnotationReport:
    labelled_by: str  # "rule" or "rule+judge"
    sampled: int  # completions sampled (failed generations excluded)
    generation_failures: int
    no_answer: int  # completions with no final answer the rule verifier can read (rule label 0)
    judged: int  # completions the judge gave a readable verdict on
    agreement_rate: float | None  # share of judged completions where judge == rule (None without a judge)
    kept: int
    positives: int
    negatives: int

    @property
    def positive_rate(self) -> float:
        return self.positives / self.kept if self.kept else 0.0

    def text(self) -> str:
        lines = [
            f"sampled {self.sampled} completions ({self.generation_failures} generation failures)",
            f"rule verifier: {self.no_answer} had no readable final answer and are labelled 0",
        ]
        if self.labelled_by == "rule":
            lines.append("no judge: labels are the rule verifier's alone (no agreement filter)")
        else:
            lines.append(f"judge gave a verdict on {self.judged}; agreement with the rule verifier "
                         f"{self.agreement_rate:.1%}; only agreeing rows are kept")
        lines.append(f"kept {self.kept}: {self.positives} positive, {self.negatives} negative "
                     f"(positive rate {self.positive_rate:.1%})")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "positive_rate": self.positive_rate}


def sample_completions(policy, records: Sequence, n: int, temperature: float, max_tokens: int, seed: int,
                       instruction: str | None) -> tuple[list[dict], int]:
    """K = n seeded samples per record: rows (id, question, reference_answer, completion), failure count."""
    from coreward.data.prompts import build_messages
    from coreward.llm import GenerationRequest

    requests, meta = [], []
    for i, record in enumerate(records):
        messages = build_messages(record.question, instruction=instruction)
        for k in range(n):
            requests.append(GenerationRequest(messages, temperature=temperature, max_tokens=max_tokens,
                                              seed=seed * 1_000_003 + i * n + k))
            meta.append({"id": f"{record.id}/{k}", "question": record.question, "reference_answer": record.answer})
    results = policy.generate(requests)
    rows = [{**m, "completion": r.text} for m, r in zip(meta, results) if r.ok]
    return rows, len(results) - len(rows)


def rows_from_eval_samples(path: str | Path, records: Sequence, per_problem: int | None = None) -> list[dict]:
    """Rows (id, question, reference_answer, completion) from the samples `coreward eval` wrote, for labelling
    instead of sampling again: eval's vLLM backend generates several times faster than a local `generate`.
    Each sample's `problem_id` names its record in `records` (the same --data and --split). `per_problem`: only
    the samples numbered below it of each problem (an evaluation at n = 24 giving an RM's rows of n = 4)."""
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        path = path / "samples.parquet"
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as error:
        raise CorewardError(f"{path}: not readable as an eval's samples.parquet ({error})") from error
    missing = [column for column in ("problem_id", "sample_index", "completion") if column not in frame.columns]
    if missing:
        raise CorewardError(f"{path}: no column {', '.join(missing)} (is it `coreward eval`'s samples.parquet?)")
    by_id = {record.id: record for record in records}
    unknown = sorted(set(frame["problem_id"]) - by_id.keys())
    if unknown:
        raise CorewardError(f"{path}: {len(unknown)} problem(s) not in the data (first: {unknown[0]}): "
                            "give the --data and --split that `coreward eval` read")
    return [{"id": f"{row.problem_id}/{row.sample_index}", "question": by_id[row.problem_id].question,
             "reference_answer": by_id[row.problem_id].answer, "completion": row.completion}
            for row in frame.itertuples()
            if isinstance(row.completion, str) and (per_problem is None or row.sample_index < per_problem)]


def pair_rows(rows: Sequence[dict]) -> list[dict]:
    """The labelled rows of the problems that have both a right and a wrong completion: the only rows a pair
    accuracy (a right completion ranked above a wrong one of its problem) reads, so a held-out set for Cooper's
    `eval_data` scores no row in vain."""
    labels: dict[tuple[str, str], set[int]] = {}
    for row in rows:
        labels.setdefault((row["question"], str(row["reference_answer"])), set()).add(row["label"])
    return [row for row in rows if labels[(row["question"], str(row["reference_answer"]))] == {0, 1}]


def judge_labels(judge, rows: Sequence[dict], max_tokens: int = 16) -> list[int | None]:
    """The judge's verdict per row (1 = matches the reference); None when it fails or answers neither."""
    from coreward.llm import GenerationRequest

    requests = [
        GenerationRequest.user(
            JUDGE_PROMPT.format(question=r["question"], reference=r["reference_answer"], completion=r["completion"]),
            temperature=0.0, max_tokens=max_tokens,
        )
        for r in rows
    ]
    return [parse_verdict(result.text) for result in judge.generate(requests)]


def parse_verdict(text: str | None) -> int | None:
    """The last YES/NO word of a judge's reply as 1/0 (None if there is none)."""
    words = _VERDICT.findall(text or "")
    return None if not words else int(words[-1].lower() == "yes")


def label_rows(rows: list[dict], verifier, judge=None) -> tuple[list[dict], AnnotationReport]:
    """Label sampled rows by the rule verifier (and the judge), keep agreements, and report."""
    results = verifier.verify_completions([r["completion"] for r in rows], [r["reference_answer"] for r in rows])
    verdicts = judge_labels(judge, rows) if judge is not None else [None] * len(rows)
    labelled_by = "rule+judge" if judge is not None else "rule"
    kept, agree = [], 0
    for row, result, verdict in zip(rows, results, verdicts):
        rule = int(result.correct)
        agree += verdict == rule
        if judge is None or verdict == rule:
            kept.append({**row, "label": rule, "rule_label": rule, "judge_label": verdict,
                         "extracted": result.extracted, "labelled_by": labelled_by})
    judged = sum(v is not None for v in verdicts)
    positives = sum(r["label"] for r in kept)
    report = AnnotationReport(
        labelled_by=labelled_by, sampled=len(rows), generation_failures=0,
        no_answer=sum(r.extracted is None for r in results), judged=judged,
        agreement_rate=agree / judged if judged else None, kept=len(kept),
        positives=positives, negatives=len(kept) - positives,
    )
    return kept, report


def write_rows(rows: list[dict], path: str | Path) -> Path:
    """Write rows as .jsonl or .parquet (by extension)."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        raise CorewardError(f"{path}: write .jsonl or .parquet")
    return path


def annotate(policy, records: Sequence, n: int, verifier, judge=None, temperature: float = 1.0,
             max_tokens: int = 512, seed: int = 0, instruction: str | None = None
             ) -> tuple[list[dict], AnnotationReport]:
    """Sample `n` completions per record from `policy` (a TextGenerator) and label them (see module doc)."""
    if not records:
        raise CorewardError("no problems to annotate")
    rows, failures = sample_completions(policy, records, n, temperature, max_tokens, seed, instruction)
    kept, report = label_rows(rows, verifier, judge)
    report.generation_failures = failures
    return kept, report
