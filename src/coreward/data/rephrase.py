"""Rephrasing questions for Co-rewarding-I: same math, same answer, new wording and scenario.

An LLM (a local Hugging Face model or an OpenAI-compatible endpoint, see `coreward.llm`) rewrites each
question once, before training. Its output must sit between fixed markers; a row whose output can't be
parsed (no markers, empty, or a number of the original missing) is dropped and counted.

Output: a parquet file with the original and the rephrased question side by side (`id`, `question`,
`rephrased`, `answer`, `source`), or, with `--format verl`, a verl parquet of the rephrased questions
aligned row by row with the original (the layout of Co-rewarding's train_rewrite_*.parquet files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from coreward.data.records import Record
from coreward.runtime.errors import CorewardError

BEGIN, END = "<rephrased>", "</rephrased>"

REPHRASE_PROMPT = """Rewrite the math problem below as a new problem that has exactly the same mathematical content.

Rules:
- Keep every number, every quantity and every relation between them; the final answer must stay the same.
- Change the wording and the scenario (new names, objects and setting), not the math.
- Do not solve the problem and do not add hints.
- Output only the rewritten problem, between {begin} and {end}.

Problem:
{question}"""

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def build_request_text(question: str) -> str:
    return REPHRASE_PROMPT.format(question=question, begin=BEGIN, end=END)


def parse_rephrasing(output: str | None, original: str) -> str | None:
    """The text between the markers, or None when it is missing, empty, or lost one of the numbers."""
    if not output:
        return None
    start = output.rfind(BEGIN)
    stop = output.find(END, start + len(BEGIN)) if start >= 0 else -1
    if start < 0 or stop < 0:
        return None
    text = output[start + len(BEGIN) : stop].strip()
    if not text or text == original.strip():
        return None
    if not set(_NUMBER.findall(original)) <= set(_NUMBER.findall(text)):
        return None  # a rewrite that drops a number can't keep the same answer
    return text


@dataclass
class RephraseReport:
    total: int
    kept: int
    failed_generation: int
    failed_parse: int

    @property
    def dropped(self) -> int:
        return self.total - self.kept


def rephrase_records(records: list[Record], generator, temperature: float = 0.7, max_tokens: int = 1024):
    """Rephrase every record; returns (kept pairs as (record, rephrased), report)."""
    from coreward.llm import GenerationRequest

    requests = [GenerationRequest.user(build_request_text(r.question), temperature=temperature, max_tokens=max_tokens)
                for r in records]
    results = generator.generate(requests)
    pairs, failed_generation, failed_parse = [], 0, 0
    for record, result in zip(records, results):
        if result.text is None:
            failed_generation += 1
            continue
        rephrased = parse_rephrasing(result.text, record.question)
        if rephrased is None:
            failed_parse += 1
            continue
        pairs.append((record, rephrased))
    return pairs, RephraseReport(len(records), len(pairs), failed_generation, failed_parse)


def demo_pairs(records: list[Record]) -> list[tuple[Record, str]]:
    """The demo task rephrases itself: another template with the same numbers and answer (offline)."""
    from coreward.data.synthetic import demo_rephrasing

    return [(r, demo_rephrasing(r)) for r in records]


def write_pairs(pairs: list[tuple[Record, str]], path: str | Path, fmt: str = "pairs") -> Path:
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "verl":
        from dataclasses import replace

        from coreward.data.verl import write_verl

        return write_verl([replace(record, question=rephrased) for record, rephrased in pairs], path)
    frame = pd.DataFrame(
        [{"id": r.id, "question": r.question, "rephrased": q2, "answer": r.answer, "source": r.source} for r, q2 in pairs]
    )
    frame.to_parquet(path, index=False)
    return path


def load_rephrasings(path: str | Path, originals: list[Record]) -> dict[str, str]:
    """Map record id -> rephrased question, from our pairs file or a verl rewrite parquet.

    A verl rewrite file (Co-rewarding's `train_rewrite_*.parquet`) is aligned with the original file row
    by row, as the authors made them; our pairs file is matched by `id`.
    """
    from coreward.data.readers import read_rows

    path = Path(path)
    rows = read_rows(path)
    if rows and "rephrased" in rows[0]:
        for i, row in enumerate(rows):
            if not row.get("id") or not row.get("rephrased"):
                raise CorewardError(f"{path}: row {i} needs non-empty 'id' and 'rephrased' columns")
        return {str(row["id"]): str(row["rephrased"]) for row in rows}
    from coreward.data.verl import read_verl

    rewrites = read_verl(path)
    if len(rewrites) != len(originals):
        raise CorewardError(
            f"{path}: a verl rewrite file must align row by row with the training data "
            f"({len(rewrites)} rows here, {len(originals)} in the training data)"
        )
    for i, (original, rewrite) in enumerate(zip(originals, rewrites)):
        if rewrite.answer and original.answer and rewrite.answer != original.answer:
            raise CorewardError(f"{path}: row {i} has answer {rewrite.answer!r}, the original has {original.answer!r}")
    return {original.id: rewrite.question for original, rewrite in zip(originals, rewrites)}
