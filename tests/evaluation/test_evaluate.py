"""Evaluation: the metrics on hand-built samples, the pipeline on a tiny random policy, the CLI, and the
evaluation-during-training callback inside a real (HF) Trainer."""

from __future__ import annotations

import importlib
import json
import math
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch

from coreward.data.records import Record
from coreward.evaluation import EvalSettings, evaluate
from coreward.evaluation.backends import Generation
from coreward.evaluation.evaluate import Problem, Sample, majority_correct, pass_at_k, sample, score, summarize
from coreward.evaluation.tables import render_table
from coreward.grpo.periodic_eval import PeriodicEvalCallback, shard
from coreward.runtime.errors import CorewardError


ENV = {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A small random demo-architecture policy: the pipeline's mechanics need no skill."""
    from tests.helpers.tiny_models import build_random_policy

    return build_random_policy(tmp_path_factory.mktemp("tiny_model"), hidden=32, layers=1)


# --------------------------------------------------------------------------- metrics


def test_pass_at_k_matches_the_combinatorial_definition():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                direct = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(direct, abs=1e-12), (n, c, k)
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # pass@1 is the fraction correct
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_majority_vote_ties_go_to_the_first_seen_answer():
    assert majority_correct([0, 1], [False, True]) is False
    assert majority_correct([1, 0], [True, False]) is True
    assert majority_correct([0, 1, 1], [False, True, True]) is True
    assert majority_correct([None, None, 0], [False, False, True]) is True  # no answer, no vote
    assert majority_correct([None, None], [False, False]) is False


def test_majority_vote_groups_equivalent_forms(verifier):
    answers = ["3", "\\frac{1}{2}", "0.5", "1/2", "3"]
    classes = verifier.equivalence_classes(answers)
    assert classes[1] == classes[2] == classes[3] != classes[0] == classes[4]
    # gold 1/2: three equivalent forms outvote two raw-equal "3"s
    assert majority_correct(classes, [False, True, True, True, False]) is True


def hand_samples(benchmark: str, completions: list[list[str]], golds: list[str]) -> list[Sample]:
    return [
        Sample(benchmark, i, f"{benchmark}-{i}", j, "q", text, gold, 3, False)
        for i, (group, gold) in enumerate(zip(completions, golds))
        for j, text in enumerate(group)
    ]


def test_summarize_hand_built_samples(verifier):
    samples = hand_samples(
        "toy",
        [
            ["\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{3}", "#### 7"],  # 2/4 right; majority 1/2 (2 votes)
            ["\\boxed{4}", "\\boxed{5}", "no answer", "\\boxed{5}"],  # 1/4 right; majority 5, wrong
            ["#### 9", "#### 9", "#### 9", "#### 9"],  # 4/4 right
        ],
        ["\\frac{1}{2}", "4", "9"],
    )
    score(samples, verifier)
    (result,) = summarize(samples, verifier).values()
    assert [s.correct for s in samples[:4]] == [True, True, False, False]
    assert samples[6].extracted is None
    assert result.num_problems == 3 and result.n == 4
    assert result.avg == pytest.approx((2 / 4 + 1 / 4 + 1) / 3)
    assert result.pass_at[1] == pytest.approx(result.avg)
    assert result.pass_at[4] == pytest.approx(1.0)
    assert result.maj == pytest.approx(2 / 3)
    assert result.metrics() == {"avg@4": result.avg, "pass@1": result.pass_at[1], "pass@4": 1.0, "maj@4": result.maj}


def test_summarize_without_references_reports_agreement_and_the_majority_answer(verifier):
    samples = hand_samples(
        "unlabeled",
        [
            ["\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{3}", "no answer"],  # majority 1/2: 2 of 4
            ["#### 9", "#### 9", "#### 9", "#### 9"],  # 4 of 4
        ],
        ["", ""],
    )
    score(samples, verifier)
    (result,) = summarize(samples, verifier).values()
    assert all(s.correct is None for s in samples)  # nothing to verify against
    assert not result.labelled and result.avg is None and result.maj is None
    assert result.metrics() == {"agree@4": pytest.approx((2 / 4 + 1) / 2), "answered": pytest.approx(7 / 8)}
    assert [s.majority_answer for s in samples[:4]] == ["0.5"] * 4 and samples[4].majority_answer == "9"
    assert "maj@4" not in result.to_dict() and result.to_dict()["labelled"] is False


def test_summarize_labelled_data_also_reports_agreement(verifier):
    samples = hand_samples("toy", [["#### 9", "#### 8", "#### 9", "#### 9"]], ["9"])
    score(samples, verifier)
    (result,) = summarize(samples, verifier).values()
    assert result.labelled and result.agree == pytest.approx(3 / 4) and result.to_dict()["agree@4"] == result.agree


def test_a_benchmark_with_some_rows_unanswered_is_refused_by_row():
    records = [Record("a", "q", "1", "mine", "test"), Record("b", "q", "", "mine", "test")]
    with pytest.raises(CorewardError, match=r"benchmark mine: rows \[1\] have no reference answer"):
        evaluate("no-such-model", benchmarks={"mine": records})


def completions(results) -> list[str]:
    return [s.completion for s in results.samples]


class ScriptedBackend:
    """Answers each prompt with scripted completions: the pipeline without a model."""

    def __init__(self, script: dict[str, list[str]]):
        self.script = script

    def generate(self, prompts, n, temperature, top_p, max_new_tokens, seed):
        return [[Generation(text, 2, False) for text in self.script[p][:n]] for p in prompts]


def test_sample_score_summarize_on_two_benchmarks(verifier):
    records = {
        "gsm8k": [Record("g0", "two plus two", "4", "gsm8k", "test")],
        "demo": [Record("d0", "ten minus one", "9", "demo", "test"), Record("d1", "one", "1", "demo", "test")],
    }
    problems = [Problem(b, i, r, r.question) for b, rs in records.items() for i, r in enumerate(rs)]
    backend = ScriptedBackend(
        {"two plus two": ["#### 4", "#### 5"], "ten minus one": ["\\boxed{9}", "\\boxed{9}"], "one": ["x", "#### 2"]}
    )
    samples = sample(backend, problems, 2, 0.7, 0.95, 8, 0)
    score(samples, verifier)
    results = summarize(samples, verifier)
    assert list(results) == ["gsm8k", "demo"]
    assert results["gsm8k"].avg == 0.5 and results["gsm8k"].pass_at[2] == 1.0
    assert results["demo"].avg == 0.5 and results["demo"].maj == 0.5


def test_table_follows_the_paper_layout():
    table = render_table([("m", "avg@8", {"demo": 0.1, "mathodyssey": 0.2, "gsm8k": 0.3})])
    header, _, row = table.splitlines()
    assert header == "| Model | Metric | GSM8K | Odyssey | Demo | Average |"
    assert row == "| m | avg@8 | 30.00 | 20.00 | 10.00 | 20.00 |"


# --------------------------------------------------------------------------- the pipeline on a model


def test_eval_writes_consistent_results_and_is_repeatable(tiny_model, tmp_path, verifier):
    kwargs = {"benchmarks": ["demo", "gsm8k"], "n": 2, "limit": 2, "max_new_tokens": 6, "seed": 3, "verifier": verifier}
    first = evaluate(str(tiny_model), output_dir=tmp_path / "a", **kwargs)
    again = evaluate(str(tiny_model), output_dir=tmp_path / "b", **kwargs)
    other = evaluate(str(tiny_model), **{**kwargs, "seed": 4})

    saved = json.loads((tmp_path / "a" / "results.json").read_text())
    frame = pd.read_parquet(tmp_path / "a" / "samples.parquet")
    assert saved["settings"]["prompt_format"] == "plain" and saved["settings"]["instruction"] is None  # demo tokenizer
    assert set(saved["benchmarks"]) == {"demo", "gsm8k"} and saved["completions_per_s"] > 0
    assert len(frame) == 2 * 2 * 2
    for name, rows in frame.groupby("benchmark"):
        per_problem = rows.groupby("problem_index")["correct"].mean()
        assert saved["benchmarks"][name]["avg@2"] == pytest.approx(per_problem.mean())
        assert saved["benchmarks"][name]["num_problems"] == 2
    assert saved["average"]["avg@2"] == pytest.approx(first.average()["avg@2"])
    assert frame.loc[frame.benchmark == "gsm8k", "gold"].tolist()[:1] == ["18"]  # GSM8K test problem 1

    assert completions(first) == completions(again)
    assert completions(first) != completions(other)
    assert json.loads((tmp_path / "b" / "results.json").read_text())["benchmarks"] == saved["benchmarks"]


class GoldBackend:
    """Stands in for HFBackend: on demo problem i, samples j < i % (n + 1) give the right answer."""

    def __init__(self, model, tokenizer, **_):
        pass

    def generate(self, prompts, n, temperature, top_p, max_new_tokens, seed):
        from coreward.data.synthetic import parse_demo

        answers = [parse_demo(p).answer for p in prompts]
        return [
            [Generation(f"#### {a if j < i % (n + 1) else a + 1}", 3, False) for j in range(n)]
            for i, a in enumerate(answers)
        ]


def test_eval_numbers_match_the_parquet(tiny_model, tmp_path, verifier, monkeypatch):
    module = importlib.import_module("coreward.evaluation.evaluate")  # the package exports a function of that name
    monkeypatch.setattr(module, "HFBackend", GoldBackend)
    results = evaluate(str(tiny_model), benchmarks=["demo"], n=4, limit=10, verifier=verifier, output_dir=tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())["benchmarks"]["demo"]
    frame = pd.read_parquet(tmp_path / "samples.parquet")
    correct = frame.groupby("problem_index")["correct"].sum()
    assert correct.tolist() == [i % 5 for i in range(10)]
    assert saved["avg@4"] == pytest.approx((correct / 4).mean()) == pytest.approx(0.5)
    assert saved["pass@4"] == pytest.approx((correct > 0).mean())
    assert saved["maj@4"] == pytest.approx((correct >= 2).mean())  # 2 of 4 right: a tie, the right one seen first
    assert results["demo"].avg == saved["avg@4"]


def test_eval_of_a_loaded_model_with_chat_prompts(tiny_model, verifier):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    records = {"demo": [Record("q", "Ann has 3 pens, buys 2. How many?", "5", "demo", "test")]}
    results = evaluate(model, tokenizer=tokenizer, benchmarks=records, n=3, max_new_tokens=4, prompt_format="chat",
                       verifier=verifier)
    assert results["demo"].num_problems == 1 and len(results.samples) == 3
    assert results.samples[0].prompt == "Ann has 3 pens, buys 2. How many?"  # the demo chat template is plain text
    assert "| Demo |" in results.table("tiny").splitlines()[0]


def test_a_chat_model_on_a_cpu_gets_defaults_that_finish_and_is_told(tiny_model, verifier, capsys):
    """On a CPU a chat model's evaluation takes `CPU_CHAT_DEFAULTS` for what the user left unset (the papers' 2,048
    tokens in batches of 64 take hours there), recorded in the results and said in one stderr line with the option
    that overrides each; on a GPU the papers' protocol is unchanged, and the demo policy keeps its own defaults."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coreward.evaluation.evaluate import CHAT_DEFAULTS, CPU_CHAT_DEFAULTS, DEMO_DEFAULTS, cpu_note, model_defaults

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert model_defaults(tokenizer, "cpu") == DEMO_DEFAULTS
    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }}\n{% endfor %}"
    assert model_defaults(tokenizer, "cuda:0") == model_defaults(tokenizer) == CHAT_DEFAULTS
    assert model_defaults(tokenizer, "cpu") == CPU_CHAT_DEFAULTS
    assert cpu_note(EvalSettings(max_new_tokens=4, batch_size=2), CPU_CHAT_DEFAULTS) is None
    assert cpu_note(EvalSettings(), CHAT_DEFAULTS) is None
    assert cpu_note(EvalSettings(), CPU_CHAT_DEFAULTS) == (
        "on a CPU, to finish in reasonable time: generating at most 512 new tokens a completion (the papers' 2048; "
        "--max-new-tokens sets it) in batches of 8 (on a GPU 64; --batch-size sets it)")

    records = {"demo": [Record("q", "Ann has 3 pens, buys 2. How many?", "5", "demo", "test")]}
    capsys.readouterr()  # loading's own bars
    results = evaluate(model, tokenizer=tokenizer, benchmarks=records, n=1, max_new_tokens=3, verifier=verifier)
    assert results.settings["device"] == "cpu" and results.settings["prompt_format"] == "chat"
    assert results.settings["batch_size"] == CPU_CHAT_DEFAULTS.batch_size and results.settings["max_new_tokens"] == 3
    assert capsys.readouterr().err.splitlines() == [
        "on a CPU, to finish in reasonable time: generating in batches of 8 (on a GPU 64; --batch-size sets it)"]


def test_generation_reports_progress_within_a_batch(tiny_model, monkeypatch):
    """`coreward eval`'s progress comes from each decoding step (backends.DecodingProgress), not only from each
    batch's end: a batch of long completions takes minutes on a CPU. Off a terminal, a line at most every 30 s (a
    clock stepped 10 s a read) with the problems done, the tokens, the batch's step and the time left, the first
    one before the first batch ends; the last one counts what was generated. On a terminal the bar says the same."""
    import io
    import sys
    import time

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coreward.evaluation.backends import HFBackend
    from coreward.runtime import progress as module

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    backend = HFBackend(model, AutoTokenizer.from_pretrained(tiny_model), batch_size=2, show_progress=True)
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    clock = iter(range(0, 100_000, 10))
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    on_batch = lambda batch, _: print(f"batch of {len(batch)} done", file=log)  # noqa: E731
    prompts = ["one plus two", "ten minus one", "two times three", "four", "five plus five", "six"]
    results = backend.generate(prompts, 1, 1.0, 1.0, 12, seed=0, on_batch=on_batch)

    lines = log.getvalue().splitlines()
    # no time left before a problem has finished (a guess from decoding steps takes every sequence to its cap)
    assert lines[0] == "generate: 0/6 problems, 6 tokens; batch 1/3 at token 3/12 (0m30s, no problem finished yet)"
    assert lines.index("batch of 2 done") > 1  # several lines within the first batch
    tokens = sum(g.num_tokens for group in results for g in group)
    assert lines[-2].startswith(f"generate: 6/6 problems, {tokens:,} tokens (") and lines[-1] == "batch of 2 done"
    per = r"(\d+ s|\dm\d\ds) per problem"  # the rate, never "0.0/s"
    assert re.fullmatch(rf".*\(\dm\d\ds, {per}\)", lines[-2]), lines[-2]
    for line in lines:
        if line == "batch of 2 done":
            continue
        found = re.fullmatch(r"generate: (\d)/6 problems, [\d,]+ tokens(; batch \d/3 at token \d+/12)? "
                             rf"\(\dm\d\ds, (no problem finished yet|{per}(, about \dm\d\ds left)?)\)", line)
        assert found, line
        assert (found.group(1) == "0") == (found.group(3) == "no problem finished yet"), line  # a rate once one has

    log.seek(0), log.truncate()
    monkeypatch.setattr(module, "is_terminal", lambda stream: True)
    backend.generate(prompts, 1, 1.0, 1.0, 12, seed=0)
    assert "problems" in log.getvalue() and "batch 1/3 at token" in log.getvalue()  # the bar's postfix


def test_eval_rejects_bad_input(tiny_model):
    with pytest.raises(CorewardError, match="'nope' is neither a benchmark"):
        evaluate(str(tiny_model), benchmarks=["nope"], n=1)
    with pytest.raises(CorewardError, match="--model: no such directory"):
        evaluate("/nonexistent/model", benchmarks=["demo"], n=1)
    with pytest.raises(CorewardError, match="vllm"):
        evaluate(str(tiny_model), benchmarks=["demo"], n=1, limit=1, backend="vllm")


# --------------------------------------------------------------------------- one settings object


def test_settings_refuse_bad_choices_before_any_model_loads():
    assert EvalSettings(benchmarks=" gsm8k,svamp, gsm8k").benchmarks == ["gsm8k", "svamp"]  # as --benchmarks reads
    for bad, message in [({"n": 0}, "n must be at least 1"), ({"prompt_format": "xml"}, "unknown prompt format"),
                         ({"backend": "tpu"}, "unknown backend"), ({"benchmarks": " , "}, "--benchmarks is empty")]:
        with pytest.raises(CorewardError, match=message):
            EvalSettings(**bad)
        with pytest.raises(CorewardError, match=message):  # not "no such directory": the model is never looked up
            evaluate("/nonexistent/model", **bad)
    with pytest.raises(TypeError, match="temprature"):
        evaluate("/nonexistent/model", temprature=0.5)


def test_keywords_are_the_settings_fields(tiny_model, verifier):
    settings = EvalSettings(benchmarks=["demo"], n=2, limit=2, max_new_tokens=5, seed=1)
    by_settings = evaluate(str(tiny_model), settings, verifier=verifier)
    by_keywords = evaluate(str(tiny_model), benchmarks=["demo"], n=2, limit=2, max_new_tokens=5, seed=1,
                           verifier=verifier)
    overridden = evaluate(str(tiny_model), settings, seed=2, verifier=verifier)  # keywords replace those fields
    assert by_settings.settings == by_keywords.settings and by_settings.settings["max_new_tokens"] == 5
    assert completions(by_settings) == completions(by_keywords) != completions(overridden)
    assert overridden.settings["seed"] == 2 and settings.seed == 1  # the caller's settings are not changed


def test_eval_options_take_default_and_help_from_the_settings():
    import dataclasses
    import inspect
    import typing

    from coreward.evaluation.cli import eval_command

    fields = {f.name: f for f in dataclasses.fields(EvalSettings)}
    shared = 0
    for name, parameter in inspect.signature(eval_command).parameters.items():
        option = typing.get_type_hints(eval_command, include_extras=True)[name].__metadata__[0]
        if name in fields and name not in ("benchmarks", "columns"):  # those two read strings: their own help
            assert parameter.default == fields[name].default, name
            assert option.help == fields[name].metadata["help"], name
            assert "--" + name.replace("_", "-") in (option.default, *option.param_decls), name  # typer: 1st is a flag
            shared += 1
    assert shared >= 14


def test_eval_command_is_a_plain_function(tiny_model, tmp_path, capsys):
    from coreward.evaluation.cli import eval_command

    eval_command(str(tiny_model), tmp_path / "out", benchmarks="demo", n=2, limit=2, max_new_tokens=4)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert list(saved["benchmarks"]) == ["demo"] and saved["benchmarks"]["demo"]["num_problems"] == 2
    assert saved["settings"]["n"] == 2 and saved["settings"]["temperature"] == EvalSettings.temperature
    assert "| Model | Metric | Demo | Average |" in capsys.readouterr().out


def run_cli(*args: str) -> subprocess.CompletedProcess:
    import os

    from tests.helpers.runs import coreward_in

    return coreward_in(Path.cwd(), *args, env={**os.environ, **ENV}, timeout=300)


def test_cli_eval(tiny_model, tmp_path):
    out = tmp_path / "eval"
    done = run_cli(
        "eval",
        "--model",
        str(tiny_model),
        "--benchmarks",
        "demo",
        "--n",
        "2",
        "--limit",
        "2",
        "--max-new-tokens",
        "4",
        "--output",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| Model | Metric | Demo | Average |" in done.stdout
    assert (out / "results.json").is_file() and (out / "samples.parquet").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "MODEL", "--benchmarks", "demo,nope"], "key --benchmarks: 'nope' is neither a benchmark"),
        (["--model", "/nonexistent/model", "--benchmarks", "demo"], "--model: no such directory: /nonexistent/model"),
    ],
)
def test_cli_eval_bad_input_exits_2(tiny_model, tmp_path, args, message):
    args = [str(tiny_model) if a == "MODEL" else a for a in args]
    done = run_cli("eval", *args, "--output", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"error: {message}" in done.stderr
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- evaluation during training


def test_shards_are_padded_to_equal_size():
    problems = list(range(5))
    shards = [shard(problems, rank, 2) for rank in range(2)]
    assert shards == [([0, 1, 2], 3), ([3, 4, 4], 2)]
    assert shard(problems[:1], 1, 2) == ([0], 0)


def test_periodic_eval_logs_into_metrics_and_keeps_the_rng(tiny_model, tmp_path, verifier):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from coreward.data.synthetic import load_demo
    from coreward.runtime.metrics import MetricsFileCallback, read_metrics

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    ids = [tokenizer(r.question + r.solution)["input_ids"][:12] for r in load_demo("train", 16)]
    train = Dataset.from_dict({"input_ids": ids, "labels": ids})
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=[MetricsFileCallback(tmp_path)],
    )
    callback = PeriodicEvalCallback(
        trainer, load_demo("test", 3), every=2, n=2, max_new_tokens=4, prompt_format="plain", verifier=verifier
    )
    trainer.add_callback(callback)
    trainer.train()

    rows = {row["step"]: row for row in read_metrics(tmp_path / "metrics.jsonl")}
    assert [s for s, row in sorted(rows.items()) if "eval/avg@2" in row] == [0, 2, 3]  # start, every 2, last
    assert {"eval/pass@2", "eval/maj@2", "time/eval", "loss"} <= set(rows[2])
    assert any("eval/avg@2" in entry for entry in trainer.state.log_history)

    model.train()
    state = torch.random.get_rng_state()
    callback.evaluate(args, trainer.state)
    assert torch.equal(state, torch.random.get_rng_state())  # training's random stream is untouched
    assert model.training  # back in train mode


def test_results_of_a_jsonl_file_record_its_source_and_no_split(tmp_path):
    """results.json of an evaluation on the user's JSONL file names the file and reads no split (it said
    `split: test`, which no file has); a registered benchmark keeps the split it read."""
    from coreward.evaluation import evaluate

    data = tmp_path / "mine.jsonl"
    data.write_text('{"question": "What is 2 + 3?", "answer": "5"}\n{"question": "What is 4 + 4?", "answer": "8"}\n')
    evaluate("demo", benchmarks=[str(data), "demo"], n=1, limit=2, output_dir=tmp_path / "out", seed=0)
    settings = json.loads((tmp_path / "out" / "results.json").read_text())["settings"]
    assert settings["data"][str(data)] == {"source": str(data.resolve()), "split": None}
    assert settings["data"]["demo"] == {"source": "benchmark demo", "split": "test"} and settings["split"] == "test"
    evaluate("demo", benchmarks=[str(data)], n=1, output_dir=tmp_path / "file-only", seed=0)
    assert json.loads((tmp_path / "file-only" / "results.json").read_text())["settings"]["split"] is None
