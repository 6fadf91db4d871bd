"""Benchmark registry: every math benchmark becomes a list of `Record`s with a clean answer string.

Only registered benchmarks are here (their files, hub copies and row mappers); any data source by name, a user's
file, directory or hub id included, is loaded by `sources.py`, and files are read by `readers.py`.

The benchmark files are never copied into the repository: they are read from a data directory
(`--data-dir`, `$COREWARD_DATA`, or `shared/data` next to the repository) or, for users with
internet, from the Hugging Face hub. Both sources go through the same row -> Record function, so
the answer normalization below is what the verifier sees either way.

Every problem with user input (missing file, bad JSON, missing field) surfaces as one
`CorewardError` that names the file, the row and the field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coreward.data.prompts import INSTRUCTION
from coreward.data.readers import count_file_rows, map_rows, read_rows
from coreward.data.records import (
    MissingField,
    Record,
    answer_text,
    clean_latex_answer,
    clean_number,
    field_of,
    gsm8k_answer,
    strip_calc,
)
from coreward.data.verl import verl_row_to_record
from coreward.runtime.errors import CorewardError
from coreward.verify import last_boxed


DATA_ENV = "COREWARD_DATA"


_ODYSSEY_QUESTION_TAIL = re.compile(r"\s*\\end\{problem\}\s*\\noindent\s*$")


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
    # as a table (datasets) each line's one key is a column: every other column of the row is None
    nested = [(k, v) for k, v in row.items() if isinstance(v, dict)]
    if len(nested) == 1:
        key, row = nested[0]
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
    # whether its questions are asked with the \boxed{} instruction; the demo task's character-level policy has
    # no words for it and reads bare questions
    instructed: bool = True


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
        # generated in code (coreward.data.synthetic, coreward.data.arith): no files, no hub
        Benchmark("demo", ("train", "test"), instructed=False),
        Benchmark("arith", ("train", "test")),
    ]
}


def list_benchmarks() -> list[str]:
    return list(BENCHMARKS)


def default_instruction(source: str) -> str | None:
    """The instruction prompts of `source` get by default: none for a benchmark asked bare, else the papers'."""
    bench = BENCHMARKS.get(source)
    return None if bench is not None and not bench.instructed else INSTRUCTION


def get_benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        from coreward.runtime.names import did_you_mean

        raise CorewardError(f"unknown benchmark {name!r}{did_you_mean(name, BENCHMARKS)}; known: {', '.join(BENCHMARKS)}")
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


def _load_generated(name: str, split: str, limit: int | None) -> list[Record]:
    """A task generated in code: the demo's (coreward.data.synthetic) or `arith` (coreward.data.arith, small real
    models' one-step arithmetic); imported only when asked for."""
    if name == "arith":
        from coreward.data.arith import load_arith

        return load_arith(split, limit)
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
        return _load_generated(name, split, limit)
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
        return len(_load_generated(name, split, None))
    return count_file_rows(benchmark_file(name, split, data_dir))
