"""Data layer: benchmark registry on the real files in shared/data, answer cleaning, verl io, prompts, CLI.

The benchmark files are found through the registry's default (shared/data next to the repository),
exactly as CI finds them; small synthetic files are written to tmp_path only to exercise bad input.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from coreward.data import cli as data_cli
from coreward.data.benchmarks import (
    benchmark_splits,
    count_rows,
    list_benchmarks,
    load_benchmark,
    resolve_data_dir,
    row_to_record,
)
from coreward.data.prompts import INSTRUCTION, build_messages, plain_prompt, render_prompt
from coreward.data.records import Record, clean_latex_answer, clean_number
from coreward.data.sources import load_records_file
from coreward.data.verl import read_verl, write_verl
from coreward.runtime.errors import CorewardError


# row counts stated in each benchmark's SOURCES.md
KNOWN_SIZES = {
    ("gsm8k", "train"): 7473,
    ("gsm8k", "test"): 1319,
    ("math", "train"): 7500,
    ("math", "test"): 5000,
    ("math500", "test"): 500,
    ("svamp", "test"): 1000,
    ("olympiadbench", "test"): 675,
    ("mathodyssey", "test"): 387,
    ("aime24", "test"): 30,
    ("amc23", "test"): 40,
}


# --------------------------------------------------------------------------- registry on real data


def test_registry_lists_every_benchmark():
    assert set(list_benchmarks()) == {name for name, _ in KNOWN_SIZES} | {"demo", "arith"}
    assert benchmark_splits("gsm8k") == ["train", "test"]
    assert benchmark_splits("math500") == ["test"]


@pytest.mark.parametrize(("name", "split"), sorted(KNOWN_SIZES))
def test_split_sizes_match_sources(name, split):
    records = load_benchmark(name, split)
    assert count_rows(name, split) == len(records) == KNOWN_SIZES[name, split]
    assert len({r.id for r in records}) == len(records), "record ids must be unique"
    assert all(r.question and r.source == name and r.split == split for r in records)


def test_answers_are_clean_strings():
    """Each caveat from the SOURCES.md files, checked on the whole benchmark."""
    assert all("####" not in r.answer and "," not in r.answer for r in load_benchmark("gsm8k", "train"))
    assert all("<<" not in r.solution for r in load_benchmark("gsm8k", "test"))
    assert all(not r.answer.endswith(".0") for r in load_benchmark("amc23"))
    assert all(not r.answer.startswith("0") for r in load_benchmark("aime24"))
    assert all(r.answer.lstrip("-").isdigit() for r in load_benchmark("svamp"))
    for record in load_benchmark("mathodyssey"):
        assert "noindent" not in record.answer and "$" not in record.answer
        assert not record.question.endswith("\\noindent") and "\\end{problem}" not in record.question
    for record in load_benchmark("olympiadbench"):
        assert not record.answer.startswith("['") and "$" not in record.answer  # a list, not its repr


def test_known_answers():
    by_id = {r.id: r for r in load_benchmark("gsm8k", "test", limit=1)}
    assert by_id["gsm8k-test-0"].answer == "18"
    assert load_benchmark("amc23", limit=1)[0].answer == "27"
    assert load_benchmark("aime24", limit=1)[0].answer == "204"
    odyssey = load_benchmark("mathodyssey", limit=1)[0]
    assert (odyssey.id, odyssey.answer, odyssey.level) == ("mathodyssey-1", "16", "high school competition")
    math500 = load_benchmark("math500", limit=1)[0]
    assert math500.answer == "\\left( 3, \\frac{\\pi}{2} \\right)" and math500.level == "Level 2"
    math = load_benchmark("math", "train", limit=1)[0]
    assert math.answer == "0" and math.level == "Level 5" and math.subject == "Algebra"
    assert "\\boxed" not in math.question  # the system-message instruction is not part of the question


def test_limit_keeps_the_first_rows():
    assert [r.id for r in load_benchmark("gsm8k", "test", limit=3)] == ["gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-2"]


def test_demo_hook():
    pytest.importorskip("coreward.data.synthetic")
    records = load_benchmark("demo", "test", limit=3)
    assert len(records) == 3 and all(isinstance(r, Record) and r.answer for r in records)


# --------------------------------------------------------------------------- answer normalization


@pytest.mark.parametrize(
    ("raw", "clean"),
    [(27.0, "27"), ("3.0", "3"), (-1.0, "-1"), (2.5, "2.5"), ("1,080", "1080"), ("025", "25"),
     ("-0", "0"), (7, "7"), ("2500,7500", "2500,7500"), ("\\frac{1}{2}", "\\frac{1}{2}")],
)
def test_clean_number(raw, clean):
    assert clean_number(raw) == clean


@pytest.mark.parametrize(
    ("raw", "clean"),
    [("16\\\\\n\\noindent", "16"), ("$\\frac{8}{3}$\\\\\n\\noindent", "\\frac{8}{3}"), ("$3$.", "3"),
     ("$2\n$", "2"), ("$69$,$84$", "69,84"), ("\\$ 9681.72", "9681.72"), ("C\n\n\\noindent", "C"),
     ("$(-\\infty, 0) \\cup\\{1\\}$.", "(-\\infty, 0) \\cup\\{1\\}")],
)
def test_clean_latex_answer(raw, clean):
    assert clean_latex_answer(raw) == clean


def test_row_mappers_on_local_and_hub_shaped_rows():
    """Hub rows go through the same mappers; these are the shapes each source uses."""
    gsm = row_to_record("gsm8k", {"question": "Q?", "answer": "2 * 540 = <<2*540=1080>>1080\n#### 1,080"})
    assert gsm.answer == "1080" and gsm.solution == "2 * 540 = 1080\n#### 1,080"
    svamp = row_to_record("svamp", {"ID": "chal-1", "Body": "He has 3 apples", "Question": "How many?", "Answer": 3.0})
    assert svamp.question == "He has 3 apples. How many?" and svamp.answer == "3"
    olympiad = row_to_record("olympiadbench", {"id": 7, "question": "Find x.", "final_answer": ["$69$,$84$"],
                                               "solution": ["a", "b"], "context": None})
    assert olympiad.answer == "69,84" and olympiad.solution == "a\n\nb"
    odyssey_hub = row_to_record(
        "mathodyssey", {"question": "Q \\end{problem}\n\\noindent", "answer": "$4$ \\\\\n\\noindent"}
    )
    assert odyssey_hub.question == "Q" and odyssey_hub.answer == "4"
    amc_hub = row_to_record("amc23", {"id": 3, "question": "What?", "answer": 36.0})
    assert amc_hub.question == "What?" and amc_hub.answer == "36"
    math_hub = row_to_record("math", {"problem": "P", "solution": "so $\\boxed{\\frac{1}{2}}$.", "level": "Level 1",
                                      "type": "Algebra"}, split="train")
    assert math_hub.answer == "\\frac{1}{2}" and math_hub.subject == "Algebra"


# --------------------------------------------------------------------------- verl parquet


def test_verl_round_trip(tmp_path):
    records = load_benchmark("math500", limit=20) + load_benchmark("gsm8k", "train", limit=5)
    path = write_verl(records, tmp_path / "out" / "train.parquet")
    assert read_verl(path) == records

    import pyarrow.parquet as pq

    row = pq.read_table(path).to_pylist()[0]
    assert row["prompt"] == [{"role": "user", "content": f"{records[0].question} {INSTRUCTION}"}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": records[0].answer}
    assert row["ability"] == "math" and row["data_source"] == "math500"


def test_foreign_verl_file_loads(tmp_path):
    """A verl user's file: extra columns, a system message, extra_info without our keys."""
    import pandas as pd

    path = tmp_path / "cooper.parquet"
    pd.DataFrame({
        "data_source": ["openai/gsm8k", "openai/gsm8k"],
        "prompt": [
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"What is 1+1? {INSTRUCTION}"}],
            [{"role": "user", "content": "What is 2+2?"}],
        ],
        "ability": ["math", "math"],
        "reward_model": [{"style": "rule", "ground_truth": "2"}, {"style": "rule", "ground_truth": "4"}],
        "extra_info": [{"index": 7, "split": "train"}, {"index": 8, "split": "train"}],
        "difficulty": [0.5, 0.9],
    }).to_parquet(path)
    first, second = load_records_file(path)
    assert (first.question, first.answer, first.split, first.source) == ("What is 1+1?", "2", "train", "openai/gsm8k")
    assert first.id == "openai/gsm8k-train-7" and second.question == "What is 2+2?"


def test_verl_missing_ground_truth_names_row_and_field(tmp_path):
    import pandas as pd

    path = tmp_path / "bad.parquet"
    pd.DataFrame({"data_source": ["x", "x"], "prompt": [[{"role": "user", "content": "q1"}]] * 2,
                  "reward_model": [{"style": "rule", "ground_truth": "1"}, {"style": "rule", "ground_truth": None}]}
                 ).to_parquet(path)
    with pytest.raises(CorewardError, match=r"bad\.parquet: row 2: missing field 'reward_model\.ground_truth'"):
        read_verl(path)


# --------------------------------------------------------------------------- user files and bad input


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_records_file_in_record_columns(tmp_path):
    rows = [{"question": "1+1?", "answer": 2.0}, {"question": "q", "answer": "x", "id": "b"}]
    path = _write_jsonl(tmp_path / "mine.jsonl", rows)
    records = load_records_file(path)
    assert [(r.id, r.answer, r.source) for r in records] == [("mine-0", "2", "mine"), ("b", "x", "mine")]


def test_records_file_missing_field_names_file_row_and_field(tmp_path):
    path = _write_jsonl(tmp_path / "mine.jsonl", [{"question": "a", "answer": "1"}, {"question": "b"}])
    with pytest.raises(CorewardError, match=r"mine\.jsonl: row 2: missing field 'answer'"):
        load_records_file(path)


def test_records_file_without_known_columns(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"problem": "a", "solution": "b"}]))
    with pytest.raises(CorewardError, match=r"rows\.json: row 1: expected columns 'question' and 'answer'.*problem"):
        load_records_file(path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [("broken.jsonl", '{"question": "a", "answer": "1"}\n{"question": \n', r"broken\.jsonl: line 2: invalid JSON"),
     ("scalar.json", "[1, 2]", r"scalar\.json: row 1: expected an object"),
     ("notparquet.parquet", "not parquet", r"cannot read .*notparquet\.parquet"),
     ("table.tsv", "a\tb", r"table\.tsv: unsupported file type")],
)
def test_unreadable_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CorewardError, match=message):
        load_records_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(CorewardError, match=r"file not found: .*nothing\.jsonl"):
        load_records_file(tmp_path / "nothing.jsonl")


def test_unknown_benchmark_and_split():
    with pytest.raises(CorewardError, match="unknown benchmark 'gsm9k'"):
        load_benchmark("gsm9k")
    with pytest.raises(CorewardError, match="'math500' has no split 'train'"):
        load_benchmark("math500", "train")


def test_missing_benchmark_file_names_the_path(tmp_path):
    with pytest.raises(CorewardError, match=r"gsm8k test: file not found: .*gsm8k/test\.jsonl"):
        load_benchmark("gsm8k", "test", data_dir=tmp_path)
    with pytest.raises(CorewardError, match="does not exist"):
        load_benchmark("gsm8k", "test", data_dir=tmp_path / "nowhere")


def test_benchmark_row_without_field_names_file_row_and_field(tmp_path):
    (tmp_path / "gsm8k").mkdir()
    _write_jsonl(tmp_path / "gsm8k" / "test.jsonl", [{"question": "a", "answer": "x\n#### 1"}, {"question": "b"}])
    with pytest.raises(CorewardError, match=r"gsm8k/test\.jsonl: row 2: missing field 'answer'"):
        load_benchmark("gsm8k", "test", data_dir=tmp_path)


def test_data_dir_from_environment(tmp_path, monkeypatch):
    (tmp_path / "amc23").mkdir()
    _write_jsonl(tmp_path / "amc23" / "test.jsonl", [{"id": 0, "problem": "p", "answer": 5.0}])
    monkeypatch.setenv("COREWARD_DATA", str(tmp_path))
    assert resolve_data_dir() == tmp_path
    assert [r.answer for r in load_benchmark("amc23")] == ["5"]


# --------------------------------------------------------------------------- prompts


def test_build_messages_and_plain_prompt():
    assert build_messages("What is 2+2?") == [{"role": "user", "content": f"What is 2+2? {INSTRUCTION}"}]
    assert build_messages("q", instruction=None, system="s") == [{"role": "system", "content": "s"},
                                                                 {"role": "user", "content": "q"}]
    assert plain_prompt(" 3+4-2= ") == "3+4-2="
    assert plain_prompt("q", INSTRUCTION) == f"q {INSTRUCTION}"


def test_render_prompt_uses_chat_template():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    with pytest.raises(CorewardError, match="no chat template"):
        render_prompt(tokenizer, build_messages("q"))
    tokenizer.chat_template = template
    assert render_prompt(tokenizer, build_messages("q")) == f"<user>q {INSTRUCTION}\n<assistant>"


# --------------------------------------------------------------------------- command line


@pytest.fixture
def run_data():
    """`coreward data ...` through typer's runner, on an app holding only the data commands."""
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """coreward"""

    data_cli.register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["data", *map(str, args)])


def test_cli_list(run_data):
    result = run_data("list")
    assert result.exit_code == 0, result.output
    for text in ("gsm8k", "1319", "7473", "olympiadbench", "675", "mathodyssey"):
        assert text in result.output


def test_cli_list_marks_missing(run_data, tmp_path):
    result = run_data("list", "--data-dir", tmp_path)
    assert result.exit_code == 0 and result.output.count("missing") >= 10


def test_cli_show(run_data):
    result = run_data("show", "gsm8k", "--split", "test", "--limit", 2, "--json")
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert result.exit_code == 0 and [row["id"] for row in lines] == ["gsm8k-test-0", "gsm8k-test-1"]
    panels = run_data("show", "math500", "--limit", 1)
    assert panels.exit_code == 0 and "answer:" in panels.output and "test/precalculus/807.json" in panels.output


def test_cli_export(run_data, tmp_path):
    out = tmp_path / "amc.parquet"
    result = run_data("export", "amc23", "--split", "test", "--format", "verl", "--output", out, "--limit", 4)
    assert result.exit_code == 0 and "wrote 4 records" in result.output
    assert read_verl(out) == load_benchmark("amc23", limit=4)
    jsonl = tmp_path / "amc.jsonl"
    assert run_data("export", out, "--format", "jsonl", "--output", jsonl).exit_code == 0
    assert load_records_file(jsonl) == load_benchmark("amc23", limit=4)


def test_cli_errors_raise_coreward_error(run_data, tmp_path):
    assert isinstance(run_data("show", "nope").exception, CorewardError)
    bad_format = run_data("export", "gsm8k", "--format", "csv", "--output", tmp_path / "x")
    assert isinstance(bad_format.exception, CorewardError)


def _main_cli_or_skip() -> None:
    """`python -m coreward.cli` needs every command group; skip until the sibling packages exist."""
    try:
        import coreward.cli  # noqa: F401
    except ImportError as err:
        pytest.skip(f"coreward.cli does not import yet: {err}")


def test_console_entry_point_exit_codes():
    _main_cli_or_skip()
    ok = subprocess.run([sys.executable, "-m", "coreward.cli", "data", "show", "aime24", "--limit", "1", "--json"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and json.loads(ok.stdout)["answer"] == "204"
    bad = subprocess.run([sys.executable, "-m", "coreward.cli", "data", "show", "no-such-benchmark"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "error:" in bad.stderr and "no-such-benchmark" in bad.stderr and "Traceback" not in bad.stderr
