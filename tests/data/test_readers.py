"""Every data source goes through `datasets`: files, save_to_disk folders, dataset repositories (the same
code path as a hub id), with column mapping, chat-message prompts and unlabeled rows; offline, a hub id fails
at once in one line."""

from __future__ import annotations

import json
import time

import pytest

from coreward.data.sources import load_named
from coreward.runtime.errors import CorewardError


CARD = """---
configs:
- config_name: easy
  data_files:
  - split: train
    path: easy/train.jsonl
  - split: test
    path: easy/test.jsonl
- config_name: hard
  data_files:
  - split: test
    path: hard/test.jsonl
---
# A dataset repository as it sits on the hub: data files and this card.
"""


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def repository(tmp_path):
    repo = tmp_path / "my-org" / "arith"
    write_jsonl(repo / "easy" / "train.jsonl", [{"problem": f"{i}+1?", "solution": i + 1} for i in range(5)])
    write_jsonl(repo / "easy" / "test.jsonl", [{"problem": "2+2?", "solution": "4"}])
    write_jsonl(repo / "hard" / "test.jsonl", [{"problem": "7*6?", "solution": 42}, {"problem": "9*9?", "solution": 81}])
    (repo / "README.md").write_text(CARD)
    return repo


def test_dataset_repository_with_subsets_and_splits(repository):
    columns = {"question": "problem", "answer": "solution"}
    train = load_named(f"{repository}:easy", "train", None, None, key="data.train", columns=columns)
    assert [(r.question, r.answer) for r in train] == [(f"{i}+1?", str(i + 1)) for i in range(5)]
    test = load_named(f"{repository}:hard", "test", None, None, key="data.eval", columns=columns)
    assert [(r.question, r.answer) for r in test] == [("7*6?", "42"), ("9*9?", "81")]
    with pytest.raises(CorewardError, match=r"key data\.eval: .*arith \(subset hard\): Unknown split \"train\""):
        load_named(f"{repository}:hard", "train", None, None, key="data.eval", columns=columns)


def test_save_to_disk_folder_and_csv_file(tmp_path):
    from datasets import Dataset, DatasetDict

    rows = [{"q": "1+1?", "a": "2", "id": "x1"}, {"q": "2+3?", "a": "5", "id": "x2"}]
    DatasetDict({"train": Dataset.from_list(rows), "test": Dataset.from_list(rows[:1])}).save_to_disk(tmp_path / "saved")
    records = load_named(str(tmp_path / "saved"), "test", None, None, key="k", columns={"question": "q", "answer": "a"})
    assert [(r.id, r.question, r.answer) for r in records] == [("x1", "1+1?", "2")]
    (tmp_path / "t.csv").write_text("question,answer\n1+1?,2\n")
    assert load_named(str(tmp_path / "t.csv"), "train", None, None, key="k")[0].answer == "2"


def test_a_mapped_column_that_is_missing_names_file_and_column(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"problem": "1+1?", "answer": "2"}])
    with pytest.raises(CorewardError, match=r"key data\.train: .*rows\.jsonl: column 'solution' \(data\.columns\.answer\) "
                                            r"is not in the data; columns: problem, answer"):
        load_named(str(path), "train", None, None, key="data.train", columns={"question": "problem", "answer": "solution"})


def test_chat_messages_as_the_prompt(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": messages, "answer": 4}])
    (record,) = load_named(str(path), "train", None, None, key="k", columns={"question": "messages"})
    assert record.question == "What is 2+2?" and record.messages == messages and record.answer == "4"

    from coreward.data.records import with_question
    from coreward.data.rows import build_rows
    from coreward.grpo.config import DataSettings

    assert build_rows([record], DataSettings())[0]["prompt"] == messages  # TRL applies the chat template
    rephrased = with_question(record, "Compute 2+2.")
    assert rephrased.messages == [messages[0], {"role": "user", "content": "Compute 2+2."}]


def test_unlabeled_rows_load_with_empty_answers(tmp_path):
    path = write_jsonl(tmp_path / "unlabeled.jsonl", [{"question": "1+1?"}, {"question": "2+2?"}])
    records = load_named(str(path), "train", None, None, key="k")
    assert [r.answer for r in records] == ["", ""]


def test_offline_hub_id_fails_at_once_in_one_line(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    start = time.monotonic()
    with pytest.raises(CorewardError) as err:
        load_named("openai/gsm8k:main", "train", None, None, key="data.train")
    assert time.monotonic() - start < 10
    message = str(err.value)
    assert "\n" not in message and message.startswith("key data.train: cannot load hub dataset openai/gsm8k")
    assert "unreachable" in message


def test_offline_mode_asks_the_cache_only(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    start = time.monotonic()
    with pytest.raises(CorewardError, match=r"key data\.train: cannot load dataset nobody/nothing"):
        load_named("nobody/nothing", "train", None, None, key="data.train")
    assert time.monotonic() - start < 10


def test_not_a_source_at_all():
    with pytest.raises(CorewardError, match=r"key k: 'gsm9k' is neither a benchmark .* nor a Hugging Face dataset id"):
        load_named("gsm9k", "train", None, None, key="k")


def test_a_column_of_mixed_types_keeps_every_value(tmp_path):
    """datasets decodes a mixed-type JSON column ("025" -> 25, "1" -> 1): such files are read value for value."""
    from coreward.data.readers import read_rows

    path = write_jsonl(tmp_path / "mixed.jsonl", [{"q": "a", "v": 1}, {"q": "b", "v": "1"}, {"q": "c", "v": "025"}])
    assert [row["v"] for row in read_rows(path)] == [1, "1", "025"]
