"""Reading rows from files (jsonl, json, parquet) and mapping them to `Record`s, with errors that name the
file, the row and the field."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from coreward.data.records import BadField, MissingField, Record
from coreward.runtime.assets import hub_unreachable
from coreward.runtime.errors import CorewardError


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


_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_FALLBACK = {".jsonl": _read_jsonl, ".json": _read_json}


@contextlib.contextmanager
def _json_builder_silent():
    logger = logging.getLogger("datasets.packaged_modules.json.json")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _quiet_datasets():
    """`datasets`, without progress bars (a run's log shows our lines, not a bar per data file)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Rows of a .jsonl, .json (array), .parquet or .csv file as dicts, read by `datasets.load_dataset`.

    JSON that Arrow cannot hold (a column that is a number in one row and text in the next, as hand-typed
    answers are) or cannot parse is read again line by line: that reader loads the former and names the
    line of the latter. Any failure is a CorewardError naming the file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _BUILDERS:
        raise CorewardError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl, .json, .parquet or .csv "
                            "(or a directory: a dataset repository or a save_to_disk folder)")
    if not path.is_file():
        raise CorewardError(f"file not found: {path}")
    if suffix == ".json":
        _check_json_array(path)
    datasets = _quiet_datasets()
    try:
        with _json_builder_silent():  # it logs Arrow's parse error itself; ours names the line, below
            dataset = datasets.load_dataset(_BUILDERS[suffix], data_files=str(path), split="train")
        # datasets keeps a column of mixed types as a `Json` feature, whose decoding turns the text "025" into
        # the number 25 and "1" into 1: such a file is read again, value for value, by the reader below
        mixed = suffix in _FALLBACK and any(type(f).__name__ == "Json" for f in dataset.features.values())
        rows = None if mixed else dataset.to_list()
    except Exception as err:  # noqa: BLE001 - Arrow, pandas and datasets each raise their own types
        if suffix not in _FALLBACK:
            raise _open_error(path, err) from None
        rows = None
    if rows is None:
        try:
            rows = _FALLBACK[suffix](path)
        except OSError as os_err:
            raise _open_error(path, os_err) from None
    return check_rows(rows, path)


def _split_of(dataset, split: str, where: str):
    """One split of a DatasetDict (a Dataset is its own split); an unknown split names the ones there are."""
    if not hasattr(dataset, "keys"):
        return dataset
    if split not in dataset:
        raise CorewardError(f"{where}: no split {split!r}; splits: {', '.join(dataset)}")
    return dataset[split]


def read_directory(path: Path, split: str, subset: str | None = None) -> list[dict]:
    """Rows of a local directory: a `save_to_disk` folder (`load_from_disk`), else a dataset repository
    (data files, optionally a dataset card naming configs), loaded exactly as its hub copy would be."""
    datasets = _quiet_datasets()
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        try:
            dataset = datasets.load_from_disk(str(path))
        except Exception as err:  # noqa: BLE001
            raise _open_error(path, err) from None
        return check_rows(_split_of(dataset, split, str(path)).to_list(), path)
    return _load_repository(str(path), subset, split)


def _load_repository(path: str, subset: str | None, split: str) -> list[dict]:
    """`datasets.load_dataset` of a hub id or a local dataset repository, one split, errors in one line."""
    datasets = _quiet_datasets()
    try:
        dataset = datasets.load_dataset(path, subset, split=split)
    except ValueError as err:  # datasets' "Unknown split" and "Config name is missing" are ValueErrors
        raise CorewardError(f"{path}{f' (subset {subset})' if subset else ''}: {_first_line(err)}") from None
    except Exception as err:  # noqa: BLE001 - missing repository, auth, offline cache misses
        raise CorewardError(f"cannot load dataset {path}{f' subset {subset}' if subset else ''} split {split}: "
                            f"{type(err).__name__}: {_first_line(err)}") from None
    return check_rows(dataset.to_list(), path)


def _first_line(err: BaseException) -> str:
    """The first line of an error, and of its cause (datasets wraps Arrow's parse errors)."""
    line = (str(err).strip().splitlines() or [""])[0][:300]
    if err.__cause__ is not None and str(err.__cause__):
        line += f" ({_first_line(err.__cause__)})"
    return line




def offline_mode() -> bool:
    """HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set: datasets reads its cache and asks no server."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_DATASETS_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def read_hub(dataset_id: str, split: str, subset: str | None = None) -> list[dict]:
    """Rows of a Hugging Face dataset id. An unreachable hub is one line at once; in offline mode a copy in
    datasets' cache is used, and a missing one is again one line."""
    if not offline_mode():
        why = hub_unreachable()
        if why is not None:
            raise CorewardError(f"cannot load hub dataset {dataset_id}: {why}. Where there is a network, "
                                "`datasets.load_dataset(...).save_to_disk(DIR)` and pass DIR here, or set "
                                "HF_HUB_OFFLINE=1 to use a cached copy")
    return _load_repository(dataset_id, subset, split)


def _check_json_array(path: Path) -> None:
    """datasets reads an array of plain values as a column named `text`: say what is wrong instead."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).lstrip()
    except OSError as err:
        raise _open_error(path, err) from None
    if head.startswith(b"[") and head[1:].lstrip()[:1] not in (b"{", b"]", b""):
        raise CorewardError(f"{path}: row 1: expected an object, found {head[1:].lstrip()[:20].decode(errors='replace')!r}")


def check_rows(rows: list, where: str | os.PathLike) -> list[dict]:
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise CorewardError(f"{where}: row {number}: expected an object, found {type(row).__name__}")
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
