"""Benchmark registry: every math benchmark becomes a list of `Record`s with a clean answer string.

The benchmark files are never copied into the repository: they are read from a data directory
(`--data-dir`, `$COREWARD_DATA`, or `shared/data` next to the repository) or, for users with
internet, from the Hugging Face hub. Both sources go through the same row -> Record function, so
the answer normalization below is what the verifier sees either way.

Every problem with user input (missing file, bad JSON, missing field) surfaces as one
`CorewardError` that names the file, the row and the field.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coreward.errors import CorewardError

DATA_ENV = "COREWARD_DATA"


@dataclass
class Record:
    """One math problem with its reference answer, whatever benchmark or file it came from."""

    id: str
    question: str
    answer: str
    source: str
    split: str
    solution: str | None = None
    level: str | None = None
    subject: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MissingField(Exception):
    """Raised by a row mapper; the loader turns it into a CorewardError naming file and row."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class BadField(Exception):
    """A field that is present but unusable (wrong type, empty); reported like `MissingField`."""

    def __init__(self, name: str, why: str):
        super().__init__(f"{name} {why}")
        self.name = name
        self.why = why


# --------------------------------------------------------------------------- answer cleaning

_THOUSANDS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")
_TRAILING_ZEROS = re.compile(r"(-?\d+)\.0+")
_LEADING_ZEROS = re.compile(r"(-?)0+(\d+)")


def clean_number(value: Any) -> str:
    """Render a numeric answer the way a person writes it: 27.0 -> "27", "1,080" -> "1080", "025" -> "25".

    Applied only to benchmarks whose answers are single numbers (GSM8K, SVAMP, AIME, AMC): in the
    others "1,9" is a list of two answers, not a thousands separator.
    """
    if isinstance(value, bool):
        raise TypeError("a boolean is not a numeric answer")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    text = str(value).strip()
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    if match := _TRAILING_ZEROS.fullmatch(text):
        text = match.group(1)
    if match := _LEADING_ZEROS.fullmatch(text):
        text = match.group(1) + match.group(2)
    return "0" if text == "-0" else text


_NOINDENT_TAIL = re.compile(r"(\\\\)?\s*\\noindent\s*$")
_LINE_BREAK_TAIL = re.compile(r"\\\\\s*$")
_DOLLAR = re.compile(r"\\?\$")


def clean_latex_answer(text: str) -> str:
    """Strip the LaTeX residue that hand-typed answers carry, keeping the math itself.

    Removes MathOdyssey's trailing `\\\\ \\noindent`, `$...$` delimiters (and `\\$` currency signs),
    newlines, and a sentence-final period ("$3$." -> "3"): math-verify parses the rest.
    """
    text = _NOINDENT_TAIL.sub("", text)
    text = _LINE_BREAK_TAIL.sub("", text)
    text = _DOLLAR.sub("", text)
    text = " ".join(text.split())
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1].rstrip()
    return text


def answer_text(value: Any, name: str = "answer") -> str:
    """Turn an answer of any JSON type into a string: numbers cleaned, lists joined by ", ".

    Raises `BadField` for what can't be an answer: an object, a boolean, NaN or infinity.
    """
    if isinstance(value, (list, tuple)):
        return ", ".join(answer_text(item, name) for item in value)
    if isinstance(value, bool) or isinstance(value, dict):
        raise BadField(name, f"must be text, a number or a list of them, got {type(value).__name__} {value!r:.40}")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadField(name, f"is not a finite number ({value})")
    if isinstance(value, (int, float)):
        return clean_number(value)
    return str(value).strip()


def text_field(row: dict, name: str) -> str:
    """A required text field: a string (numbers are not questions), not empty."""
    value = field_of(row, name)
    if not isinstance(value, str):
        raise BadField(name, f"must be text, got {type(value).__name__} {value!r:.40}")
    if not value.strip():
        raise BadField(name, "is empty")
    return value.strip()


_CALC = re.compile(r"<<[^<>]*>>")


def gsm8k_answer(solution: str) -> str:
    """GSM8K solutions end in `#### <number>`; the number is the reference answer."""
    if "####" not in solution:
        raise MissingField("answer (no '#### ' final answer)")
    return clean_number(solution.rsplit("####", 1)[1])


def strip_calc(solution: str) -> str:
    """Drop GSM8K's `<<48/2=24>>` calculator annotations, which are not part of the written solution."""
    return _CALC.sub("", solution)


_ODYSSEY_QUESTION_TAIL = re.compile(r"\s*\\end\{problem\}\s*\\noindent\s*$")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (nested braces allowed): MATH's hub rows keep the answer there."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for pos in range(begin, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            if depth == 0:
                return text[begin:pos].strip()
            depth -= 1
    return None


# --------------------------------------------------------------------------- row mappers


def field_of(row: dict, *names: str) -> Any:
    """The first of `names` present (and not None) in `row`: hub and local copies spell fields differently."""
    for name in names:
        if row.get(name) is not None:
            return row[name]
    raise MissingField(" or ".join(names))


def _gsm8k_row(row: dict, split: str, index: int) -> Record:
    solution = str(field_of(row, "answer"))
    return Record(
        id=f"gsm8k-{split}-{index}",
        question=str(field_of(row, "question")).strip(),
        answer=gsm8k_answer(solution),
        source="gsm8k",
        split=split,
        solution=strip_calc(solution),
    )


def _math_row(row: dict, split: str, index: int) -> Record:
    """Local MATH is Co-rewarding's verl parquet; the hub copy (MATH-lighteval) has raw MATH columns."""
    if "reward_model" in row:
        from coreward.data.verl import verl_row_to_record

        record = verl_row_to_record(row, index, default_split=split)
        record.id, record.source, record.split = f"math-{split}-{index}", "math", split
        return record
    solution = str(field_of(row, "solution"))
    answer = last_boxed(solution)
    if answer is None:
        raise MissingField("solution (no \\boxed{} answer)")
    return Record(
        id=f"math-{split}-{index}",
        question=str(field_of(row, "problem")).strip(),
        answer=answer,
        source="math",
        split=split,
        solution=solution,
        level=row.get("level"),
        subject=row.get("type"),
    )


def _math_level(level: Any) -> str | None:
    """MATH-500 stores level 3, MATH stores "Level 3": use the latter everywhere."""
    if level is None:
        return None
    return f"Level {level}" if isinstance(level, int) else str(level)


def _math500_row(row: dict, split: str, index: int) -> Record:
    return Record(
        id=str(row.get("unique_id") or f"math500-{index}"),
        question=str(field_of(row, "problem")).strip(),
        answer=answer_text(field_of(row, "answer")),
        source="math500",
        split=split,
        solution=row.get("solution"),
        level=_math_level(row.get("level")),
        subject=row.get("subject"),
    )


def _svamp_row(row: dict, split: str, index: int) -> Record:
    """Question = Body + Question; a period is added when Body lacks one (as Qwen2.5-Math's eval does)."""
    body = str(field_of(row, "Body")).strip()
    if not body.endswith("."):
        body += "."
    return Record(
        id=f"svamp-{row.get('ID', index)}",
        question=f"{body} {str(field_of(row, 'Question')).strip()}",
        answer=clean_number(field_of(row, "Answer")),
        source="svamp",
        split=split,
        solution=row.get("Equation"),
        subject=row.get("Type"),
    )


def _olympiadbench_row(row: dict, split: str, index: int) -> Record:
    """`final_answer` is a list of strings (usually one, "$...$"-wrapped); `solution` a list of texts."""
    question = str(field_of(row, "question")).strip()
    if row.get("context"):
        question = f"{str(row['context']).strip()}\n{question}"
    final = field_of(row, "final_answer")
    final = final if isinstance(final, list) else [final]
    solution = row.get("solution")
    return Record(
        id=f"olympiadbench-{row.get('id', index)}",
        question=question,
        answer=", ".join(clean_latex_answer(str(part)) for part in final),
        source="olympiadbench",
        split=split,
        solution="\n\n".join(solution) if isinstance(solution, list) else solution,
        subject=row.get("subfield"),
    )


def _mathodyssey_row(row: dict, split: str, index: int) -> Record:
    """Local lines are `{"Problem_N": {...}}`; texts end in `\\end{problem} \\noindent` residue."""
    key = f"Problem_{index + 1}"
    if len(row) == 1 and isinstance(next(iter(row.values())), dict):
        key, row = next(iter(row.items()))
    question = _ODYSSEY_QUESTION_TAIL.sub("", str(field_of(row, "question"))).strip()
    return Record(
        id=f"mathodyssey-{key.removeprefix('Problem_')}",
        question=question,
        answer=clean_latex_answer(str(field_of(row, "answer"))),
        source="mathodyssey",
        split=split,
        solution=row.get("reasoning"),
        level=row.get("level"),
        subject=row.get("label"),
    )


def _competition_row(name: str) -> Callable[[dict, str, int], Record]:
    """AIME/AMC rows (Qwen2.5-Math eval files): `problem`, numeric `answer` ("025", 27.0)."""

    def to_record(row: dict, split: str, index: int) -> Record:
        return Record(
            id=f"{name}-{row.get('id', index)}",
            question=str(field_of(row, "problem", "question")).strip(),
            answer=clean_number(field_of(row, "answer")),
            source=name,
            split=split,
            solution=row.get("solution"),
        )

    return to_record


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class HubSource:
    """Where the community keeps a benchmark on the Hugging Face hub; `splits` maps ours to theirs."""

    path: str
    config: str | None
    splits: dict[str, str]


@dataclass(frozen=True)
class Benchmark:
    name: str
    splits: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)  # split -> path under the data directory
    to_record: Callable[[dict, str, int], Record] | None = None
    hub: HubSource | None = None


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark(
            "gsm8k",
            ("train", "test"),
            {"train": "gsm8k/train.jsonl", "test": "gsm8k/test.jsonl"},
            _gsm8k_row,
            HubSource("openai/gsm8k", "main", {"train": "train", "test": "test"}),
        ),
        Benchmark(
            "math",
            ("train", "test"),
            {"train": "math/train.parquet", "test": "math/test.parquet"},
            _math_row,
            HubSource("DigitalLearningGmbH/MATH-lighteval", "default", {"train": "train", "test": "test"}),
        ),
        Benchmark(
            "math500",
            ("test",),
            {"test": "math500/math500_test.json"},
            _math500_row,
            HubSource("HuggingFaceH4/MATH-500", None, {"test": "test"}),
        ),
        Benchmark(
            "svamp",
            ("test",),
            {"test": "svamp/test.jsonl"},
            _svamp_row,
            # the hub copy splits SVAMP's 1000 problems 700/300; evaluation uses all of them
            HubSource("ChilleD/SVAMP", None, {"test": "train+test"}),
        ),
        Benchmark(
            "olympiadbench",
            ("test",),
            {"test": "olympiadbench/test.jsonl"},
            _olympiadbench_row,
            HubSource("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", {"test": "train"}),
        ),
        Benchmark(
            "mathodyssey",
            ("test",),
            {"test": "mathodyssey/final-odyssey-math-with-levels.jsonl"},
            _mathodyssey_row,
            HubSource("MathOdyssey/MathOdyssey", None, {"test": "test"}),
        ),
        Benchmark(
            "aime24",
            ("test",),
            {"test": "aime24/test.jsonl"},
            _competition_row("aime24"),
            HubSource("HuggingFaceH4/aime_2024", None, {"test": "train"}),
        ),
        Benchmark(
            "amc23",
            ("test",),
            {"test": "amc23/test.jsonl"},
            _competition_row("amc23"),
            HubSource("math-ai/amc23", None, {"test": "test"}),
        ),
        # generated in code by coreward.data.synthetic: no files, no hub
        Benchmark("demo", ("train", "test")),
    ]
}


def list_benchmarks() -> list[str]:
    return list(BENCHMARKS)


def get_benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise CorewardError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


def benchmark_splits(name: str) -> list[str]:
    return list(get_benchmark(name).splits)


def _check_split(bench: Benchmark, split: str) -> None:
    if split not in bench.splits:
        raise CorewardError(f"benchmark {bench.name!r} has no split {split!r}; splits: {', '.join(bench.splits)}")


def row_to_record(name: str, row: dict, split: str = "test", index: int = 0) -> Record:
    """Map one raw row (local file or hub) of benchmark `name` to a Record; raises MissingField."""
    bench = get_benchmark(name)
    if bench.to_record is None:
        raise CorewardError(f"benchmark {name!r} is generated in code and has no raw rows")
    return bench.to_record(row, split, index)


# --------------------------------------------------------------------------- data directory


def _default_data_dirs() -> list[Path]:
    """`shared/data` beside any ancestor of this file (the repository's sibling), then beside the cwd."""
    here = Path(__file__).resolve()
    return [parent / "shared" / "data" for parent in here.parents] + [Path.cwd().parent / "shared" / "data"]


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The directory that holds `<benchmark>/<file>`: argument, else $COREWARD_DATA, else the default."""
    explicit = data_dir if data_dir is not None else os.environ.get(DATA_ENV) or None
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            origin = "--data-dir" if data_dir is not None else f"${DATA_ENV}"
            raise CorewardError(f"data directory {path} (from {origin}) does not exist")
        return path
    for candidate in _default_data_dirs():
        if candidate.is_dir():
            return candidate
    raise CorewardError(f"no data directory found: pass --data-dir or set ${DATA_ENV} (looked for shared/data "
                        "next to the repository and next to the current directory)")


def benchmark_file(name: str, split: str, data_dir: str | os.PathLike | None = None) -> Path:
    bench = get_benchmark(name)
    _check_split(bench, split)
    path = resolve_data_dir(data_dir) / bench.files[split]
    if not path.is_file():
        raise CorewardError(f"{name} {split}: file not found: {path} (pass --data-dir or set ${DATA_ENV})")
    return path


# --------------------------------------------------------------------------- file reading


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


# --------------------------------------------------------------------------- loading


def _load_demo(split: str, limit: int | None) -> list[Record]:
    """The demo task lives in coreward.data.synthetic; import it only when asked for."""
    try:
        from coreward.data.synthetic import load_demo
    except ModuleNotFoundError as err:
        if err.name != "coreward.data.synthetic":
            raise
        raise CorewardError("benchmark 'demo' needs coreward.data.synthetic, which is not installed") from None
    return load_demo(split, limit)


def _load_hub(bench: Benchmark, split: str, limit: int | None) -> list[Record]:
    """Load from the hub with `datasets` and map rows exactly like the local files."""
    if bench.hub is None:
        raise CorewardError(f"benchmark {bench.name!r} has no hub source")
    from datasets import load_dataset

    hub = bench.hub
    try:
        dataset = load_dataset(hub.path, hub.config, split=hub.splits[split])
    except Exception as err:  # network, auth, renamed dataset: all are the user's to fix
        raise CorewardError(f"cannot load {bench.name} {split} from the hub ({hub.path}): {err}") from None
    return map_rows(dataset, lambda row, i: bench.to_record(row, split, i), f"hub dataset {hub.path}", limit)


def load_benchmark(
    name: str,
    split: str = "test",
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    source: str = "local",
) -> list[Record]:
    """Records of one benchmark split, from the data directory (`source="local"`) or the hub."""
    bench = get_benchmark(name)
    _check_split(bench, split)
    if bench.to_record is None:
        return _load_demo(split, limit)
    if source == "hub":
        return _load_hub(bench, split, limit)
    if source != "local":
        raise CorewardError(f"unknown data source {source!r}; use 'local' or 'hub'")
    path = benchmark_file(name, split, data_dir)
    return map_rows(read_rows(path), lambda row, i: bench.to_record(row, split, i), str(path), limit)


def count_rows(name: str, split: str, data_dir: str | os.PathLike | None = None) -> int:
    """Number of records in a benchmark split (raises CorewardError when its file is missing)."""
    bench = get_benchmark(name)
    _check_split(bench, split)
    if bench.to_record is None:
        return len(_load_demo(split, None))
    return count_file_rows(benchmark_file(name, split, data_dir))


def _plain_record_row(path: Path) -> Callable[[dict, int], Record]:
    """Mapper for files in our own Record columns; only question and answer are required."""

    def to_record(row: dict, index: int) -> Record:
        return Record(
            id=str(row.get("id") or f"{path.stem}-{index}"),
            question=text_field(row, "question"),
            answer=answer_text(field_of(row, "answer")),
            source=str(row.get("source") or path.stem),
            split=str(row.get("split") or "unknown"),
            solution=row.get("solution"),
            level=None if row.get("level") is None else str(row["level"]),
            subject=row.get("subject"),
        )

    return to_record


def load_records_file(path: str | os.PathLike, limit: int | None = None) -> list[Record]:
    """A user's file (jsonl/json/parquet) in Record columns or in verl format, told apart by its columns."""
    from coreward.data.verl import is_verl_row, verl_row_to_record

    path = Path(path)
    rows = read_rows(path)
    if not rows:
        return []
    first = rows[0]
    if is_verl_row(first):
        return map_rows(rows, verl_row_to_record, str(path), limit)
    if "question" in first and "answer" in first:
        return map_rows(rows, _plain_record_row(path), str(path), limit)
    raise CorewardError(
        f"{path}: row 1: expected columns 'question' and 'answer' (coreward records) or 'prompt' and "
        f"'reward_model' (verl format); found: {', '.join(map(str, first)) or 'none'}"
    )


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


def load_named(source: str, split: str, limit: int | None, data_dir: str | os.PathLike | None, key: str) -> list[Record]:
    """Records from a registered benchmark name or a jsonl/json/parquet file (verl parquet too).

    `key` is the config key that named `source`, so a typo is reported against it.
    """
    if source in list_benchmarks():
        try:
            records = load_benchmark(source, split=split, data_dir=data_dir, limit=limit)
        except CorewardError as err:
            raise CorewardError(f"key {key}: {err}") from None
    elif Path(source).suffix in (".jsonl", ".json", ".parquet"):
        try:
            records = load_records_file(source, limit=limit)
        except CorewardError as err:
            raise CorewardError(f"key {key}: {err}") from None
    else:
        raise CorewardError(
            f"key {key}: {source!r} is neither a benchmark ({', '.join(list_benchmarks())}) "
            "nor a .jsonl/.json/.parquet file"
        )
    if not records:
        raise CorewardError(f"key {key}: {source!r} (split {split!r}) has no problems")
    return records
