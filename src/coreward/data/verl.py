"""verl-format parquet, the training-data format Cooper and Co-rewarding users already hold.

One row per problem:
    data_source   str                                  (e.g. "gsm8k")
    prompt        [{"role": "user", "content": ...}]   chat messages, instruction included
    ability       "math"
    reward_model  {"style": "rule", "ground_truth": answer}
    extra_info    {"split", "index", "question", "answer", ...}

Reading is lenient on purpose: files written by other tools carry extra columns, system messages,
and `extra_info` without our keys; only the ground truth and some way to get the question are required.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coreward.data.prompts import INSTRUCTION, build_messages
from coreward.data.readers import map_rows, read_rows
from coreward.data.records import MissingField, Record, answer_text
from coreward.runtime.errors import CorewardError


def is_verl_row(row: dict) -> bool:
    """A row is verl-format when it carries a chat `prompt` or a `reward_model` column."""
    return "reward_model" in row or "prompt" in row


def to_verl_row(record: Record, index: int, instruction: str | None = INSTRUCTION) -> dict:
    """One verl row; `extra_info` keeps the bare question and answer so reading back is exact."""
    extra = {
        "split": record.split,
        "index": index,
        "id": record.id,
        "question": record.question,
        "answer": record.answer,
        "solution": record.solution,
        "level": record.level,
        "subject": record.subject,
    }
    return {
        "data_source": record.source,
        "prompt": build_messages(record.question, instruction),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": record.answer},
        "extra_info": {key: value for key, value in extra.items() if value is not None},
    }


def write_verl(records: Iterable[Record], path: str | os.PathLike, instruction: str | None = INSTRUCTION) -> Path:
    """Write records as verl parquet (parent directories are created)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    rows = [to_verl_row(record, index, instruction) for index, record in enumerate(records)]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)
    except OSError as err:
        raise CorewardError(f"cannot write {path}: {err}") from None
    return path


def _strip_instruction(content: str, instruction: str | None) -> str:
    """Remove the instruction from a user message, whether it was appended (the papers) or prepended."""
    content = content.strip()
    if instruction:
        if content.endswith(instruction):
            content = content[: -len(instruction)]
        elif content.startswith(instruction):
            content = content[len(instruction) :]
    return content.strip()


def _question_from_prompt(prompt: Any, instruction: str | None) -> str:
    """The question is the last user message (or the prompt itself when it is a plain string)."""
    if isinstance(prompt, str):
        return _strip_instruction(prompt, instruction)
    if not isinstance(prompt, (list, tuple)):
        raise MissingField("prompt")
    user = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user" and m.get("content")]
    if not user:
        raise MissingField("prompt (no user message)")
    return _strip_instruction(str(user[-1]["content"]), instruction)


def _ground_truth(row: dict, extra: dict) -> Any:
    reward = row.get("reward_model")
    if isinstance(reward, dict) and reward.get("ground_truth") is not None:
        return reward["ground_truth"]
    if extra.get("answer") is not None:
        return extra["answer"]
    raise MissingField("reward_model.ground_truth")


def verl_row_to_record(
    row: dict, index: int, default_split: str = "unknown", instruction: str | None = INSTRUCTION
) -> Record:
    """A verl row as a Record: question from `extra_info.question`, else the user message minus instruction."""
    extra = row.get("extra_info")
    extra = extra if isinstance(extra, dict) else {}
    answer = answer_text(_ground_truth(row, extra))
    question = extra.get("question") or _question_from_prompt(row.get("prompt"), instruction)
    source = str(row.get("data_source") or "verl")
    split = str(extra.get("split") or default_split)
    level = extra.get("level") or row.get("level")
    return Record(
        id=str(extra.get("id") or f"{source}-{split}-{extra.get('index', index)}"),
        question=str(question).strip(),
        answer=answer,
        source=source,
        split=split,
        solution=extra.get("solution"),
        level=None if level is None else str(level),
        subject=extra.get("subject") or row.get("subject") or row.get("type"),
    )


def read_verl(path: str | os.PathLike, instruction: str | None = INSTRUCTION) -> list[Record]:
    """Records from a verl parquet (or jsonl) file written by us, verl, Cooper or Co-rewarding."""
    path = Path(path)
    rows = read_rows(path)
    return map_rows(rows, lambda row, i: verl_row_to_record(row, i, instruction=instruction), str(path))
