"""Every data source by name: a registered benchmark (`benchmarks.py`), or a user's file, directory or hub dataset
id (rows read by `readers.py`, mapped to `Record`s here). Training data, held-out sets, RM annotation and rephrasing
all load through `load_named`; evaluation sets (`coreward eval`, evaluation during training) through `load_eval_sets`.

    load_named(source) -> registered benchmark? -> benchmarks.load_benchmark
                       -> else: source_rows (readers: file, directory, hub id) -> rows_to_records (Record columns,
                                mapped columns, or verl format)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from coreward.data.benchmarks import list_benchmarks, load_benchmark
from coreward.data.readers import map_rows, read_directory, read_hub, read_rows
from coreward.data.records import Record, answer_text, field_of, question_of
from coreward.data.verl import is_verl_row, verl_row_to_record
from coreward.runtime.errors import CorewardError


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_FILE_TYPES = (".jsonl", ".json", ".parquet", ".csv")


def source_rows(source: str, split: str) -> tuple[list[dict], str]:
    """Raw rows of a file, a directory (save_to_disk or dataset repository) or a hub id, and a name for errors.

    `PATH_OR_ID:SUBSET` picks a subset (a dataset config: `openai/gsm8k:main`). Every one is read by `datasets`.
    """
    base, subset = source, None
    if not Path(source).exists() and ":" in source:
        base, _, subset = source.rpartition(":")
    path = Path(base).expanduser()
    if path.is_dir():
        return read_directory(path, split, subset), f"{path}" + (f" (split {split})" if split else "")
    if path.is_file() or path.suffix.lower() in _FILE_TYPES:  # read_rows names an unsupported type
        return read_rows(path), str(path)
    if _HUB_ID.fullmatch(base):
        return read_hub(base, split, subset), f"hub dataset {base} (split {split})"
    from coreward.runtime.names import did_you_mean

    raise CorewardError(
        f"{source!r} is neither a benchmark ({', '.join(list_benchmarks())}), a .jsonl/.json/.parquet/.csv file, "
        f"a directory, nor a Hugging Face dataset id (owner/name[:subset]){did_you_mean(source, list_benchmarks())}"
    )


def parse_columns(text: str | None, option: str = "--columns") -> dict[str, str]:
    """`question=problem,answer=solution` (a command-line option) as a column mapping."""
    columns = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        field_name, sep, column = item.partition("=")
        if not sep or field_name.strip() not in ("question", "answer", "id", "solution") or not column.strip():
            raise CorewardError(f"{option} {item!r}: expected FIELD=COLUMN with FIELD one of question, answer, id, solution")
        columns[field_name.strip()] = column.strip()
    return columns


def load_named(
    source: str,
    split: str,
    limit: int | None,
    data_dir: str | os.PathLike | None,
    key: str,
    columns: dict[str, str] | None = None,
) -> list[Record]:
    """Records from a registered benchmark, a local file or directory, or a hub dataset id: every data
    source of every command goes through here.

    `key` is the config key (or option) that named `source`, so an error is reported against it; `columns`
    maps Record fields to the data's columns (`{question: problem, answer: solution}`).
    """
    try:
        if source in list_benchmarks():
            if columns:
                raise CorewardError(f"{source!r} is a registered benchmark: its columns are known, drop the column mapping")
            records = load_benchmark(source, split=split, data_dir=data_dir, limit=limit)
        else:
            rows, where = source_rows(source, split)
            records = rows_to_records(rows, where, columns, limit, name=_record_prefix(source))
    except CorewardError as err:
        raise CorewardError(f"key {key}: {err}") from None
    if not records:
        raise CorewardError(f"key {key}: {source!r} (split {split!r}) has no problems")
    return records


def _record_prefix(source: str) -> str:
    """Ids of rows without an id column: `<file stem or dataset name>-<row>`."""
    base = source.rpartition(":")[0] if ":" in source and not Path(source).exists() else source
    return Path(base).stem or Path(base).name


def rows_to_records(
    rows: list[dict], where: str, columns: dict[str, str] | None = None, limit: int | None = None, name: str = "data"
) -> list[Record]:
    """Records of a user's rows: verl format, or any columns named by `columns` (defaults: question, answer).

    Without an answer column the records are unlabeled (answer ""): enough for the methods that need no
    reference; those that do are refused before training (`check_references`).
    """
    if not rows:
        return []
    first = rows[0]
    columns = dict(columns or {})
    question, answer = columns.get("question", "question"), columns.get("answer", "answer")
    if not columns and question not in first and is_verl_row(first):
        return with_user_columns(map_rows(rows, verl_row_to_record, where, limit), rows)
    found = ", ".join(map(str, first)) or "none"
    for field_name, column in columns.items():
        if column not in first:
            raise CorewardError(f"{where}: column {column!r} (data.columns.{field_name}) is not in the data; columns: {found}")
    if question not in first:
        raise CorewardError(
            f"{where}: row 1: expected columns 'question' and 'answer' (coreward records; the answer may be left out "
            f"for methods that need no reference, and data.columns maps other names) or 'prompt' and "
            f"'reward_model' (verl format); found: {found}"
        )
    labelled = any(answer in row for row in rows)
    return with_user_columns(map_rows(rows, _mapped_row(name, question, answer if labelled else None, columns), where,
                                      limit), rows)


def with_user_columns(records: list[Record], rows: list[dict]) -> list[Record]:
    """Each record keeps its row as the data gave it (`Record.user_columns`), as TRL hands a reward function every
    dataset column: a function written for the user's own column names (`problem`, `solution`) finds them."""
    for record, row in zip(records, rows):  # map_rows maps rows in order, one record each
        record.user_columns = row
    return records


def _mapped_row(name: str, question: str, answer: str | None, columns: dict[str, str]) -> Callable[[dict, int], Record]:
    """Mapper for a user's rows; `answer=None`: unlabeled data."""
    id_column, solution_column = columns.get("id", "id"), columns.get("solution", "solution")

    def to_record(row: dict, index: int) -> Record:
        text, messages = question_of(row, question)
        return Record(
            id=str(row.get(id_column) or f"{name}-{index}"),
            question=text,
            answer="" if answer is None else answer_text(field_of(row, answer), answer),
            source=str(row.get("source") or name),
            split=str(row.get("split") or "unknown"),
            solution=None if row.get(solution_column) is None else str(row[solution_column]),
            level=None if row.get("level") is None else str(row["level"]),
            subject=None if row.get("subject") is None else str(row["subject"]),
            messages=messages,
        )

    return to_record


def load_records_file(path: str | os.PathLike, limit: int | None = None, columns: dict[str, str] | None = None) -> list[Record]:
    """A user's file (jsonl/json/parquet/csv) in Record columns, mapped columns, or verl format."""
    path = Path(path)
    return rows_to_records(read_rows(path), str(path), columns, limit, name=path.stem)


def load_eval_sets(names: Sequence[str], split: str, limit: int | None, data_dir: str | os.PathLike | None, key: str,
                   columns: dict[str, str] | None = None, where: str = "key {key}: {name}") -> dict[str, list[Record]]:
    """The records of each held-out set by name (a benchmark, file, directory or hub id, first `limit` problems), as
    `coreward eval` and evaluation during training read them: each set has a reference answer in every row
    (accuracies) or in none (label-free agreement), never a mix. `key` names the setting in errors, `where` a set."""
    records = {name: load_named(name, split, limit, data_dir, key=key, columns=columns) for name in names}
    for name, rows in records.items():
        refuse_mixed_references(rows, where.format(key=key, name=name))
    return records


def refuse_mixed_references(records: list[Record], where: str) -> None:
    """All rows with a reference answer (accuracies), or none (label-free agree@n); a mix is refused by row."""
    missing = [i for i, r in enumerate(records) if not r.answer]
    if missing and len(missing) < len(records):
        shown = f"{missing[:5]}{' ...' if len(missing) > 5 else ''}"
        raise CorewardError(f"{where}: rows {shown} have no reference answer "
                            f"while {len(records) - len(missing)} others have one; give every row an answer or none")
