"""The authors' DAPO / Open-RS / AMC preprocessors on local files: layout, read-back, bad rows."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from coreward.data.preprocess import preprocess_file, preprocess_rows
from coreward.data.prompts import INSTRUCTION
from coreward.data.verl import read_verl
from coreward.runtime.errors import CorewardError


def test_dapo_rows_are_laid_out_as_the_authors_write_them_and_read_back(tmp_path):
    source = tmp_path / "dapo.jsonl"
    source.write_text("\n".join(json.dumps({"prompt": f"What is {i}+1?", "solution": str(i + 1), "source_prompt": "x"})
                                for i in range(3)) + "\n")
    out = tmp_path / "data" / "dapo" / "train.parquet"
    done = subprocess.run([sys.executable, "-m", "coreward.cli", "data", "preprocess", "dapo", "--input", str(source),
                           "--output", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    frame = pd.read_parquet(out)
    first = frame.iloc[0]
    assert [dict(m) for m in first["prompt"]] == [{"role": "system", "content": INSTRUCTION},
                                                  {"role": "user", "content": "What is 0+1?"}]
    assert first["data_source"] == "DigitalLearningGmbH/MATH-lighteval" and first["ability"] == "math"
    assert dict(first["reward_model"]) == {"style": "rule", "ground_truth": "1"}
    records = read_verl(out)
    assert [(r.question, r.answer) for r in records] == [(f"What is {i}+1?", str(i + 1)) for i in range(3)]


def test_openrs_keeps_level_and_amc_takes_its_source(tmp_path):
    rows = preprocess_rows("openrs", [{"problem": "2+2?", "answer": "4", "level": "Level 1"}])
    assert rows[0]["extra_info"] == {"split": "train", "index": 0, "level": "Level 1"}
    (tmp_path / "amc.json").write_text(json.dumps([{"prompt": "3+3?", "answer": 6, "source": "amc", "id": "a1"}]))
    preprocess_file("amc", tmp_path / "amc.json", tmp_path / "amc.parquet", data_source="AMC-TTT")
    row = pd.read_parquet(tmp_path / "amc.parquet").iloc[0]
    assert row["data_source"] == "AMC-TTT" and dict(row["reward_model"])["ground_truth"] == "6"
    assert dict(row["extra_info"]) == {"index": 0, "source": "amc", "id": "a1"}


def test_a_missing_column_names_file_row_and_column(tmp_path):
    with pytest.raises(CorewardError, match=r"dapo.jsonl: row 1 has no 'solution'"):
        preprocess_rows("dapo", [{"prompt": "a", "solution": "1"}, {"prompt": "b"}], source=str(tmp_path / "dapo.jsonl"))
    with pytest.raises(CorewardError, match="unknown preprocessor 'gsm'"):
        preprocess_rows("gsm", [])
