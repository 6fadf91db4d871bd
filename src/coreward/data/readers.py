"""Reading rows from files (jsonl, json, parquet) and mapping them to `Record`s, with errors that name the
file, the row and the field."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from coreward.runtime.errors import CorewardError

from coreward.data.records import BadField, MissingField, Record


def _open_error(path: Path, err: Exception) -> CorewardError:
    return CorewardError(f"cannot read {path}: {err}")


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise CorewardError(f"{path}: line {line_no}: not UTF-8 text (byte {err.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise CorewardError(f"{path}: line {line_no}: invalid JSON ({err.msg})") from None
    return rows


def _read_json(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CorewardError(f"{path}: invalid JSON at line {err.lineno} ({err.msg})") from None
    if not isinstance(data, list):
        raise CorewardError(f"{path}: expected a JSON array of objects, found {type(data).__name__}")
    return data


def _read_parquet(path: Path) -> list[dict]:
    """pyarrow rather than pandas: nested columns (prompt, reward_model) come back as plain lists and dicts."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


_READERS = {".jsonl": _read_jsonl, ".json": _read_json, ".parquet": _read_parquet}


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Rows of a .jsonl, .json (array) or .parquet file as dicts; any failure is a CorewardError."""
    path = Path(path)
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise CorewardError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl, .json or .parquet")
    if not path.is_file():
        raise CorewardError(f"file not found: {path}")
    try:
        rows = reader(path)
    except (OSError, ValueError) as err:  # permissions, encoding, pyarrow's ArrowInvalid
        raise _open_error(path, err) from None
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise CorewardError(f"{path}: row {number}: expected an object, found {type(row).__name__}")
    return rows


def map_rows(
    rows: Iterable[dict], to_record: Callable[[dict, int], Record], where: str, limit: int | None = None
) -> list[Record]:
    """Apply a row mapper, turning a missing field into an error that names `where`, the row and the field."""
    records = []
    for index, row in enumerate(rows):
        if limit is not None and index >= limit:
            break
        try:
            record = to_record(row, index)
        except MissingField as missing:
            raise CorewardError(f"{where}: row {index + 1}: missing field {missing.name!r}") from None
        except BadField as bad:
            raise CorewardError(f"{where}: row {index + 1}: field {bad.name!r} {bad.why}") from None
        if not record.question.strip():
            raise CorewardError(f"{where}: row {index + 1}: the question is empty")
        records.append(record)
    return records


def count_file_rows(path: Path) -> int:
    """Row count without mapping: cheap enough for `coreward data list` over every benchmark."""
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(path).metadata.num_rows
        if path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as handle:
                return sum(1 for line in handle if line.strip())
    except (OSError, ValueError) as err:
        raise _open_error(path, err) from None
    return len(read_rows(path))


def write_records_jsonl(records: Iterable[Record], path: str | os.PathLike) -> Path:
    """Write records as JSON lines in Record columns, the format `load_records_file` reads back."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
    except OSError as err:
        raise CorewardError(f"cannot write {path}: {err}") from None
    return path
