"""Bad data and bad config: a clear `CorewardError` naming the file, row or key, before any model loads.

Each case runs `run_training` in this process with model loading replaced by a tripwire, so a case that
slipped past the checks fails loudly instead of loading a model. The CLI maps the error to exit status 2
(one case below goes through the real command line).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from coreward.grpo.config import TrainConfig
from coreward.runtime.config import load_config
from coreward.runtime.errors import CorewardError
from tests.helpers.runs import coreward_in


REPO = Path(__file__).resolve().parents[2]
RULE = REPO / "configs" / "demo" / "rule.yaml"
OK = {"question": "Ann has 2 pens, buys 3. How many?", "answer": "5"}


def rows_file(name: str, rows: list | None = None, raw: str | bytes | None = None):
    """A data file written into the test's directory (`{dir}` is filled in by the test)."""
    return name, rows, raw


# (case id, overrides; a "{file}" in them is the case's data file, written from `rows`/`raw`), message
CASES = [
    # --- data files
    ("empty file", ["data.train={file}"], rows_file("d.jsonl", raw=""), r"key data\.train: .*d\.jsonl.* has no problems"),
    ("empty JSON array", ["data.train={file}"], rows_file("d.json", raw="[]"), r"key data\.train: .*has no problems"),
    ("only blank lines", ["data.train={file}"], rows_file("d.jsonl", raw="\n \n\n"), r"has no problems"),
    ("broken JSON line", ["data.train={file}"], rows_file("d.jsonl", raw=json.dumps(OK) + '\n{"question": \n'),
     r"d\.jsonl: line 2: invalid JSON"),
    ("not UTF-8", ["data.train={file}"], rows_file("d.jsonl", raw=json.dumps(OK).encode() + b'\n{"question": "\xff"}\n'),
     r"d\.jsonl: line 2: not UTF-8"),
    ("row not an object", ["data.train={file}"], rows_file("d.json", [OK, [1, 2]]), r"d\.json: row 2: expected an object"),
    ("unknown columns", ["data.train={file}"], rows_file("d.jsonl", [{"problem": "a", "solution": "1"}]),
     r"d\.jsonl: row 1: expected columns 'question' and 'answer'"),
    ("missing answer", ["data.train={file}"], rows_file("d.jsonl", [OK, {"question": "q"}]), r"row 2: missing field 'answer'"),
    ("null answer", ["data.train={file}"], rows_file("d.jsonl", [OK, {"question": "q", "answer": None}]),
     r"row 2: missing field 'answer'"),
    ("question not text", ["data.train={file}"], rows_file("d.jsonl", [OK, {"question": ["a"], "answer": "1"}]),
     r"d\.jsonl: row 2: field 'question' must be text or a list of chat messages .*, got list"),
    ("question a number", ["data.train={file}"], rows_file("d.jsonl", [OK, {"question": 7, "answer": "1"}]),
     r"row 2: field 'question' must be text or a list of chat messages .*, got int"),
    ("empty question", ["data.train={file}"], rows_file("d.jsonl", [OK, {"question": "  ", "answer": "1"}]),
     r"row 2: field 'question' is empty"),
    ("answer an object", ["data.train={file}"], rows_file("d.jsonl", [OK, {"question": "q", "answer": {"x": 1}}]),
     r"row 2: field 'answer' must be text, a number or a list of them, got dict"),
    ("answer a boolean", ["data.train={file}"], rows_file("d.jsonl", [OK, {"question": "q", "answer": True}]),
     r"row 2: field 'answer' must be text.*got bool"),
    ("answer NaN", ["data.train={file}"], rows_file("d.jsonl", raw=json.dumps(OK) + '\n{"question": "q", "answer": NaN}\n'),
     r"row 2: (field 'answer' is not a finite number|missing field 'answer')"),
    ("empty reference", ["data.train={file}"], rows_file("d.jsonl", [OK, {"question": "q", "answer": ""}]),
     r"key data\.train: .*d\.jsonl: row 2 \(id d-1\): the reference answer '' is empty; reward 'rule'"),
    ("reference that doesn't parse", ["data.train={file}"], rows_file("d.jsonl", [OK, OK, {"question": "q", "answer": "\\frac{1}{"}]),
     r"d\.jsonl: row 3 \(id d-2\): the reference answer .* has unbalanced braces"),
    ("reference beyond the verifier", ["data.train={file}"],
     rows_file("d.jsonl", [OK, {"question": "q", "answer": "(" * 30 + "1" + ")" * 30}]), r"row 2 .* beyond the verifier's budget"),
    ("verl row without ground truth", ["data.train={file}"],
     rows_file("d.jsonl", [{"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"style": "rule"}}]),
     r"d\.jsonl: row 1: missing field 'reward_model\.ground_truth'"),
    ("missing data file", ["data.train={dir}/nope.jsonl"], None, r"key data\.train: file not found: .*nope\.jsonl"),
    ("unsupported file type", ["data.train={dir}/data.tsv"], None, r"key data\.train: .* is neither a benchmark"),
    ("unknown benchmark", ["data.train=gsm9k"], None, r"key data\.train: 'gsm9k' is neither a benchmark"),
    ("unknown split", ["data.train=demo", "data.split=validation"], None, r"key data\.train: .*has no split 'validation'"),
    ("missing eval file", ["data.eval={dir}/nope.jsonl", "data.eval_every=5"], None, r"key data\.eval: file not found"),
    ("missing rephrasings file", ["rewards.0.name=co_rewarding_1", "rewards.0.params.rephrasings={dir}/nope.jsonl"], None,
     r"key rewards\.0\.params\.rephrasings: file not found"),
    ("reference column that doesn't exist", ["data.reference_column=solutions"], None,
     r"key data\.reference_column: 'solutions' is not a column"),
    ("fewer problems than one step takes", ["data.limit=3"], None,
     r"key data\.train: 3 prompts in demo, but one step samples 16"),
    # --- config
    ("G=1", ["grpo.num_generations=1"], None, r"key grpo\.num_generations must be at least 2"),
    ("G=0", ["grpo.num_generations=0"], None, r"key grpo\.num_generations must be at least 2"),
    ("batch not a multiple of G", ["grpo.per_device_train_batch_size=12"], None, r"must be a multiple of grpo\.num_generations \(8\)"),
    ("generation batch not a multiple of G", ["grpo.generation_batch_size=100"], None, r"\(100 completions.*multiple of"),
    ("accumulated batch not a multiple of G", ["grpo.per_device_train_batch_size=4", "grpo.steps_per_generation=3"], None,
     r"\(12 completions.*multiple of grpo\.num_generations \(8\)"),
    ("paired views need an even number of prompts", ["rewards.0.name=co_rewarding_1",
                                                     "rewards.0.params.rephrasings=demo",
                                                     "grpo.per_device_train_batch_size=24"], None, r"even number of prompts"),
    ("zero batch", ["grpo.per_device_train_batch_size=0"], None, r"key grpo\.per_device_train_batch_size must be >= 1"),
    ("negative learning rate", ["grpo.learning_rate=-1e-6"], None, r"key grpo\.learning_rate must be >= 0"),
    ("zero completion length", ["grpo.max_completion_length=0"], None, r"key grpo\.max_completion_length must be >= 1"),
    ("zero temperature", ["grpo.temperature=0"], None, r"key grpo\.temperature must be > 0"),
    ("wrong type", ["grpo.learning_rate=fast"], None, r"key grpo\.learning_rate must be a number"),
    ("unknown grpo key", ["grpo.learning_rat=1e-6"], None, r"key grpo\.learning_rat: not a trl\.GRPOConfig option"),
    ("unknown top-level key", ["data.limt=3"], None, r"data\.limt"),
    ("zero limit", ["data.limit=0"], None, r"key data\.limit must be >= 1"),
    ("negative limit", ["data.limit=-5"], None, r"key data\.limit must be >= 1"),
    ("unknown reward", ["rewards.0.name=rulez"], None, r"key rewards\.0\.name: unknown reward 'rulez'"),
    ("unknown reward parameter", ["rewards.0.params.nonsense=1"], None, r"key rewards\.0\.params\.nonsense"),
    ("reward parameter out of range", ["rewards.0.name=majority", "rewards.0.params.match=fuzzy"], None,
     r"reward 'majority': key rewards\.0\.params\.match must be one of \['verified', 'exact'\]"),
    ("model directory that doesn't exist", ["model.name_or_path={dir}/no-policy"], None,
     r"key model\.name_or_path: no such directory"),
    ("bad dtype", ["model.dtype=float64"], None, r"model\.dtype"),
    ("zero threads", ["torch_threads=0"], None, r"key torch_threads must be >= 1"),
    ("zero verifier deadline", ["verifier.timeout_s=0"], None, r"key verifier\.timeout_s must be > 0"),
    ("zero completion budget", ["verifier.max_completion_chars=0"], None, r"key verifier\.max_completion_chars must be >= 1"),
    ("LoRA rank 0", ["lora.enabled=true", "lora.r=0"], None, r"key lora\.r must be >= 1"),
    ("malformed kill point", ["@COREWARD_FAULT_AT=rewards:3"], None, r"COREWARD_FAULT_AT='rewards:3'"),
]


@pytest.fixture
def no_model_loading(monkeypatch):
    """Any attempt to load a tokenizer or model fails the test."""
    import transformers

    def tripwire(*args, **kwargs):
        raise AssertionError("a model or tokenizer was loaded before the bad input was reported")

    for name in ("AutoTokenizer", "AutoModelForCausalLM", "AutoModelForSequenceClassification"):
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained", tripwire)


@pytest.mark.parametrize("overrides, data, message", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_named_before_any_model_loads(overrides, data, message, tmp_path, monkeypatch, no_model_loading):
    from coreward.grpo.train import run_training

    file = None
    if data is not None:
        name, rows, raw = data
        file = tmp_path / name
        if raw is None:
            raw = "".join(json.dumps(row) + "\n" for row in rows) if name.endswith(".jsonl") else json.dumps(rows)
        file.write_bytes(raw if isinstance(raw, bytes) else raw.encode())
    settings = []
    for item in overrides:
        item = item.format(file=file, dir=tmp_path)
        if item.startswith("@"):  # an environment variable
            key, value = item[1:].split("=", 1)
            monkeypatch.setenv(key, value)
        else:
            settings.append(item)
    run_dir = tmp_path / "run"
    with pytest.raises(CorewardError, match=message):
        config = load_config(TrainConfig, RULE, ["data.eval_every=0", *settings])
        run_training(config, output_dir=str(run_dir), max_steps=1)
    assert not run_dir.exists()  # nothing written either


def test_batch_checks_count_every_process(monkeypatch):
    """The generation batch that must divide into groups is global: per-device batch × processes. 4 per device
    with G=8 is wrong for one process and right for two (torchrun sets WORLD_SIZE)."""
    settings = ["grpo.per_device_train_batch_size=4", "grpo.num_generations=8"]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(CorewardError, match=r"\(4 completions: .* × 1 process\(es\)"):
        load_config(TrainConfig, RULE, settings)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert load_config(TrainConfig, RULE, settings).grpo["per_device_train_batch_size"] == 4
    with pytest.raises(CorewardError, match=r"even number of prompts"):  # 8 completions = 1 prompt: no pair
        load_config(TrainConfig, RULE, [*settings, "rewards.0.name=co_rewarding_1", "rewards.0.params.rephrasings=demo"])


def test_registered_benchmark_rows_without_a_usable_reference_are_left_out(capsys, monkeypatch):
    """A shipped benchmark can't be fixed by the user (MATH's train split has two empty answers): such rows are
    left out and counted, not fatal."""
    from coreward.data.benchmarks import load_benchmark
    from coreward.data.rows import check_references
    from coreward.grpo.train import reference_users

    records = load_benchmark("demo", "train", limit=4)
    records[1].answer = ""
    config = load_config(TrainConfig, RULE, ["data.train=demo"])
    kept = check_references(records, config.data, reference_users(config))
    assert [r.id for r in kept] == [records[i].id for i in (0, 2, 3)]
    assert f"left out 1 of 4 problems of demo whose reference answer can't be verified: {records[1].id}" in capsys.readouterr().out
    majority = load_config(TrainConfig, RULE, ["data.train=demo", "rewards.0.name=majority"])
    # a self-supervised reward doesn't read references
    assert len(check_references(records, majority.data, reference_users(majority))) == 4


def test_bad_data_file_on_the_command_line_exits_2_naming_file_and_row(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps(OK) + "\n" + json.dumps({"question": "q", "answer": {"x": 1}}) + "\n")
    done = coreward_in(Path.cwd(), "train", "--config", str(RULE), "--set", f"data.train={data}",
                       "--output-dir", str(tmp_path / "r"), env=dict(os.environ), timeout=120)
    assert done.returncode == 2
    assert "mine.jsonl: row 2: field 'answer'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "r").exists()
