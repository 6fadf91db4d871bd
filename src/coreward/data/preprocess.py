"""The Co-rewarding authors' data preprocessors, for a local copy of each dataset: verl parquet laid out as
their scripts write it (the `\\boxed{}` instruction as the system message, the question as the user message).

    coreward data preprocess dapo   --input DAPO-Math-17k-Processed/en/train.parquet --output data/dapo/train.parquet
    coreward data preprocess openrs --input open-rs/train.parquet                    --output data/open-rs/train.parquet
    coreward data preprocess amc    --input AMC-TTT/test.json                        --output data/AMC-TTT/test.parquet

Sources (tmlr-group/Co-rewarding, Co-rewarding-II/examples/data_preprocess/): `dapo17ken_dataset.py`
(open-r1/DAPO-Math-17k-Processed, config "en": prompt, solution), `open-rs.py` (knoveleng/open-rs: problem,
answer, level), `amc.py` (a JSON array or JSON lines of {prompt, answer, source, id}). Their `data_source`
values are kept: DAPO and Open-RS rows say "DigitalLearningGmbH/MATH-lighteval", so verl scores them as MATH.
The input is a file the user downloaded (this project makes no hub downloads); the training configs read the
output as any verl parquet (`data.train: data/dapo/train.parquet`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coreward.data.prompts import INSTRUCTION
from coreward.runtime.errors import CorewardError


@dataclass(frozen=True)
class Preset:
    question: str  # the input column holding the problem
    answer: str  # the input column holding the reference answer
    data_source: str | None  # written to every row; None: the --data-source option (amc.py's argument)
    split: str | None  # extra_info.split (amc.py writes none)
    extra: tuple[str, ...] = ()  # input columns copied into extra_info


PRESETS = {
    "dapo": Preset("prompt", "solution", "DigitalLearningGmbH/MATH-lighteval", "train"),
    "openrs": Preset("problem", "answer", "DigitalLearningGmbH/MATH-lighteval", "train", ("level",)),
    "amc": Preset("prompt", "answer", None, None, ("source", "id")),
}


def preprocess_rows(name: str, rows: list[dict], source: str = "input", data_source: str = "AMC-TTT") -> list[dict]:
    """verl rows as the authors' script `name` writes them; a missing column is an error naming row and column."""
    if name not in PRESETS:
        raise CorewardError(f"unknown preprocessor {name!r}; use one of: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    out = []
    for index, row in enumerate(rows):
        for column in (preset.question, preset.answer):
            if name != "amc" and row.get(column) in (None, ""):  # amc.py falls back to "" for both
                raise CorewardError(f"{source}: row {index} has no {column!r} (the {name} preprocessor needs it)")
        extra = {"split": preset.split} if preset.split else {}
        extra["index"] = index
        extra.update({key: row.get(key) for key in preset.extra})
        out.append({
            "data_source": preset.data_source or data_source,
            "prompt": [{"role": "system", "content": INSTRUCTION},
                       {"role": "user", "content": str(row.get(preset.question) or "")}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(row.get(preset.answer) or "")},
            "extra_info": extra,
        })
    return out


def preprocess_file(name: str, input_path: str | Path, output_path: str | Path, data_source: str = "AMC-TTT") -> int:
    """Read `input_path` (.parquet, .jsonl or a .json array), write verl parquet; returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from coreward.data.readers import read_rows

    rows = preprocess_rows(name, read_rows(input_path), str(input_path), data_source)
    if not rows:
        raise CorewardError(f"{input_path}: no rows")
    output_path = Path(output_path)
    try:
        output_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), output_path)
    except OSError as err:
        raise CorewardError(f"cannot write {output_path}: {err}") from None
    return len(rows)
