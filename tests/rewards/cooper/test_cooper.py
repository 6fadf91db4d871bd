"""Cooper: the perturbation assistant, pair selection, the retry rule, the pairwise update, held-out RM accuracy
rising on the demo task, an endpoint assistant against a real misbehaving HTTP server, identical RMs on two
processes (torchrun), and save / load / resume.

Models are tiny and built here: a 2-layer policy taught four demo problems by heart (so its rollouts are
often verified, and pairs exist), and RMs on tiny Qwen3 backbones. The file doubles as the torchrun worker:
    torchrun --nproc_per_node 2 tests/rewards/cooper/test_cooper.py worker POLICY RM OUT STEPS
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from coreward.data.synthetic import VERIFIABLE_FORMATS, demo_problems
from coreward.demo.model import build_demo_model, build_demo_tokenizer
from coreward.llm import GenerationResult, OpenAIEndpointGenerator
from coreward.rewards.base import RolloutBatch
from coreward.rewards.cooper import CooperReward, select_positives
from coreward.rewards.cooper.assistant import (
    USER_TEMPLATE,
    Assistant,
    LLMAssistant,
    NegativeRequest,
    PerturbationAssistant,
    build_assistant,
    perturb,
    write_negatives,
)
from coreward.rewards.cooper.learner import RM_DIR, Pair, RMLearner, pairwise_loss
from coreward.rm.evaluate import pair_accuracy
from coreward.rm.model import TAGS, VerifyRM, format_input
from coreward.runtime.errors import CorewardError
from coreward.verify import extract_answer
from tests.helpers import warm_launch
from tests.helpers.kill_resume import free_port


REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "configs" / "demo" / "cooper.yaml"
QUESTION = "Ann has 12 apples, buys 5, sells 3. How many?"
POSITIVE = "12+5=17;17-3=14;#### 14"


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def tiny_lm(hidden: int = 32, tags: bool = False):
    tokenizer = build_demo_tokenizer()
    if tags:
        tokenizer.add_tokens(list(TAGS))
    return build_demo_model(tokenizer, seed=0, hidden=hidden, layers=2, heads=2, kv_heads=1, intermediate=2 * hidden), tokenizer


def fit(model, tokenizer, texts: list[list[str]], lr: float) -> None:
    """Plain causal-LM training, one batch of texts per step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for batch in texts:
        encoded = tokenizer(batch, return_tensors="pt", padding=True)
        labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
        model(**encoded, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.fixture(scope="module")
def policy(memorized_policy) -> Path:
    """A tiny policy that knows the first four demo train problems by heart: at temperature 1 it is often right."""
    return memorized_policy


@pytest.fixture(scope="module")
def tiny_rm(tiny_rm_path) -> Path:
    """A random tiny VerifyRM (what it scores does not matter to the mechanics)."""
    return tiny_rm_path


# ---------------------------------------------------------------------------------- the perturbation assistant
def skeleton(text: str) -> str:
    return re.sub(r"\d+", "N", text)


def test_perturbation_is_wrong_but_alike(verifier):
    problems = demo_problems("test")[:60]
    positives = [p.solution(VERIFIABLE_FORMATS[i % 2]) for i, p in enumerate(problems)]
    requests = [NegativeRequest(p.question(), pos, str(p.answer), seed=i) for i, (p, pos) in enumerate(zip(problems, positives))]
    results = PerturbationAssistant().write(requests)
    negatives = [r.text for r in results]
    assert all(r.ok for r in results)
    for positive, negative in zip(positives, negatives):
        assert negative != positive
        assert skeleton(negative) == skeleton(positive)  # same steps, same operators, same answer format
        assert abs(len(negative) - len(positive)) <= 3
    verdicts = verifier.verify_completions(negatives, [str(p.answer) for p in problems])
    assert all(v.extracted is not None and not v.correct for v in verdicts)
    # both kinds of wrong appear: a slip carried through the steps, and right steps with another final answer
    same_steps = [neg.rsplit(";", 1)[0] == pos.rsplit(";", 1)[0] for pos, neg in zip(positives, negatives)]
    assert any(same_steps) and not all(same_steps)
    assert PerturbationAssistant().write(requests)[0].text == negatives[0]  # seeded: deterministic
    assert len({perturb(POSITIVE, "14", random.Random(seed)) for seed in range(20)}) > 5


def test_perturbation_carries_the_slip_and_handles_other_formats():
    for seed in range(30):  # every step that uses a moved value is recomputed: the arithmetic after a slip holds
        text = perturb(POSITIVE, "14", random.Random(seed))
        first, operand, second, final = map(int, re.fullmatch(r"12\+5=(\d+);(\d+)-3=(\d+);#### (\d+)", text).groups())
        assert operand == first and final != 14
        if first != 17:  # a slip in step 1, carried into step 2 and the final line
            assert second == first - 3 and final == second
        elif second != 14:  # a slip in step 2, carried into the final line
            assert final == second
    gsm8k = "She sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    wrong = perturb(gsm8k, "72", random.Random(1))
    assert extract_answer(wrong) not in (None, "72") and skeleton(wrong) == skeleton(gsm8k)
    unusable = PerturbationAssistant().write([NegativeRequest("q", "so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 0)])[0]
    assert unusable.text is None and "no number or `a op b` of it" in unusable.error


def test_perturbation_moves_an_unevaluated_answer_and_never_returns_the_positive(verifier):
    """A policy may leave its answer unevaluated, `\\boxed{2 + 14}`, which the rule evaluates and accepts
    (SmolLM2's Cooper run got no negative for it): the last operand moves, so the value moves, and the negative is
    wrong to the rule. An answer whose value the solution writes nowhere gives no negative, never the positive."""
    for positive, reference in (("So the answer is \\boxed{2 + 14}.", "16"), ("\\boxed{9 - 9}", "0"),
                                ("We get \\boxed{6 * 3}", "18"), ("\\boxed{8/4}", "2"), ("19 * 8 = 19 * 8", "152")):
        extracted = verifier.verify_completions([positive], [reference])[0]
        assert extracted.correct, positive
        negatives = [r.text for r in PerturbationAssistant().write(
            [NegativeRequest("q", positive, extracted.extracted, seed) for seed in range(12)])]
        assert all(n is not None and n != positive for n in negatives), (positive, negatives)
        assert not any(v.correct for v in verifier.verify_completions(negatives, [reference] * len(negatives)))
    assert perturb("The answer is \\boxed{16}.", "17", random.Random(0)) is None


def test_perturbation_moves_an_equation_answer(verifier):
    """A policy trained on a rule's reward answers in one line, `14 + 13 = 27`, and the rule reads the equation as
    its final answer: the perturbation moves its right-hand side (SmolLM2's Cooper run got no negative at 8 of 20
    steps when it could not), and the negative is never the positive, whichever slip point is drawn."""
    for positive, answer in (("14 + 13 = 27", "27"), ("15 x 2 = 30", "30"), ("16 - 7 = 9", "9")):
        extracted = verifier.verify_completions([positive], [answer])[0].extracted
        negatives = [r.text for r in PerturbationAssistant().write(
            [NegativeRequest("q", positive, extracted, seed) for seed in range(12)])]
        assert all(n is not None and n != positive for n in negatives), (positive, extracted, negatives)
        assert not any(v.correct for v in verifier.verify_completions(negatives, [answer] * len(negatives)))
        assert {n.rsplit("=", 1)[0] for n in negatives} == {positive.rsplit("=", 1)[0]}  # only the result moved
        # as Cooper asks, with the positive's extracted answer (the whole equation): every negative is kept. Checked
        # against the equation itself, math-verify held `14 + 13 = 28` equal to `14 + 13 = 27` and refused them all
        # (SmolLM2's Cooper seed 1 had pairs at 6 of 20 steps)
        kept = write_negatives(PerturbationAssistant(), verifier,
                               [NegativeRequest("q", positive, extracted, seed) for seed in range(12)], max_retries=2)
        assert all(t is not None for t in kept.texts) and kept.rejected == 0, (positive, extracted, kept)


# ---------------------------------------------------------------------------------- pairs
def test_positive_selection():
    correct = [False, True, False, True, False, False, False, False, True, True, True, False]
    scores = [0.9, 0.8, 0.1, 0.3, 0.5, 0.5, 0.5, 0.5, 0.7, 0.2, 0.2, 0.9]
    assert select_positives(correct, scores, G=4, rule="first") == [1, None, 8]
    assert select_positives(correct, scores, G=4, rule="hardest") == [3, None, 9]  # lowest RM score; ties: first


class Scripted(Assistant):
    """Returns the scripted texts per question in order (None = a failed request); records every call."""

    def __init__(self, scripts: dict[str, list[str | None]]):
        self.scripts = {q: list(texts) for q, texts in scripts.items()}
        self.calls: list[list[NegativeRequest]] = []

    def write(self, requests):
        self.calls.append(requests)
        texts = [self.scripts[r.question].pop(0) for r in requests]
        return [GenerationResult(t, None if t else "down", latency_s=0.5) for t in texts]


def test_retry_until_the_answer_is_wrong(verifier):
    script = {
        "right twice": ["12+5=17;17-3=14;#### 14", "so \\boxed{14}", "12+5=17;17-3=15;#### 15"],
        "no answer": ["12+5=17;17-3=14;", "#### 14", "I give up", "still nothing"],
        "failed": [None],
    }
    requests = [NegativeRequest(q, POSITIVE, "14", seed=i) for i, q in enumerate(script)]
    assistant = Scripted(script)
    outcome = write_negatives(assistant, verifier, requests, max_retries=3)
    assert outcome.texts == ["12+5=17;17-3=15;#### 15", None, None]
    assert [len(call) for call in assistant.calls] == [3, 2, 2, 1]  # a failed request is not asked again
    assert outcome.rejected == 2 + 4 and outcome.failures == 1
    assert len(outcome.latencies) == 8
    assert len({r.seed for call in assistant.calls for r in call if r.question == "no answer"}) == 4  # a new seed each try
    fewer = write_negatives(Scripted(script), verifier, requests[:1], max_retries=1)
    assert fewer.texts == [None] and fewer.rejected == 2  # two tries, both still right: the pair is dropped


# ---------------------------------------------------------------------------------- the pairwise update
def test_pairwise_loss_and_update_direction(tiny_rm):
    s_pos, s_neg = torch.tensor([2.0, -1.0, 0.0]), torch.tensor([0.0, 1.0, 0.0])
    expected = [-torch.log(torch.sigmoid(torch.tensor(d))).item() for d in (2.0, -2.0, 0.0)]
    assert pairwise_loss(s_pos, s_neg).tolist() == pytest.approx(expected)

    learner = RMLearner(VerifyRM.from_pretrained(tiny_rm, device="cpu"), lr=1e-3, batch_size=4)
    pairs = [Pair(p.question(), str(p.answer), p.solution("hash"), perturb(p.solution("hash"), str(p.answer), random.Random(i)))
             for i, p in enumerate(demo_problems("train")[:6])]

    def margins() -> torch.Tensor:
        scores = learner.rm.score([p.question for p in pairs] * 2, [p.reference for p in pairs] * 2,
                                  [p.positive for p in pairs] + [p.negative for p in pairs])
        logits = torch.logit(torch.tensor(scores, dtype=torch.float64))
        return logits[:6] - logits[6:]

    before = margins()
    metrics = learner.update(pairs)  # 6 pairs in chunks of 2 (batch_size 4 = 2 pairs per forward)
    assert metrics["rm/loss"] == pytest.approx(pairwise_loss(before, torch.zeros(6)).mean().item(), abs=1e-4)
    assert metrics["rm/score_pos"] > 0 and metrics["rm/grad_norm"] > 0
    assert (margins() - before).mean() > 0 and learner.updates == 1

    weights = {n: p.detach().clone() for n, p in learner.rm.model.named_parameters()}
    learner.rm.model.score.weight.data[0, 0] = float("nan")  # a NaN logit: non-finite gradient norm
    weights["score.weight"][0, 0] = float("nan")
    learner.update(pairs[:1])
    assert learner.skipped == 1 and learner.updates == 1
    for name, p in learner.rm.model.named_parameters():  # the step was skipped: nothing moved
        assert torch.equal(p.nan_to_num(7.0), weights[name].nan_to_num(7.0)), name
    assert learner.update([]) == {}


def test_pair_accuracy_counts_every_correct_wrong_combination():
    rows = [{"question": "a", "reference_answer": "1", "label": 1}, {"question": "a", "reference_answer": "1", "label": 0},
            {"question": "a", "reference_answer": "1", "label": 0}, {"question": "b", "reference_answer": "2", "label": 1},
            {"question": "b", "reference_answer": "2", "label": 0}, {"question": "c", "reference_answer": "3", "label": 1}]
    assert pair_accuracy(rows, [0.9, 0.2, 0.95, 0.4, 0.4, 0.1]) == pytest.approx((1 + 0 + 0.5) / 3)
    assert pair_accuracy(rows[5:], [0.3]) is None


@pytest.fixture(scope="module")
def weak_demo_rm(tmp_path_factory) -> Path:
    """A weak start on the demo task: a backbone that has read demo texts in the RM's template, a fresh head.

    A miniature of the demo RM's recipe (its backbone is the demo policy, which knows the task). From random
    weights a model this small does not learn to compare the final answer with the reference in a test's time.
    """
    torch.manual_seed(0)
    model, tokenizer = tiny_lm(hidden=64, tags=True)
    problems = demo_problems("train")[5000:9000]  # enough for the asserts below on seeds 0-5, with room
    texts = [format_input(p.question(), str(p.answer), p.solution(VERIFIABLE_FORMATS[i % 2])) for i, p in enumerate(problems)]
    fit(model, tokenizer, [texts[i : i + 16] for i in range(0, len(texts), 16)], lr=3e-3)
    path = tmp_path_factory.mktemp("weak_backbone")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    rm_path = path / "rm"
    VerifyRM.from_backbone(path, device="cpu", add_template_tokens=True, max_length=128).save_pretrained(rm_path)
    return rm_path


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rm_learns_the_pairs_it_is_shown(weak_demo_rm, verifier, seed):
    """Cooper's pairs and update alone: the RM comes to rank the positives it is shown above their negatives.

    A property of the update that holds for every initialisation and floating-point path, unlike how fast
    held-out accuracy rises (from 100 to over 500 updates depending on the seed, and on the CPU type): here a
    fresh score head (seeded) and 48 fixed pairs (demo train problems, assistant near misses), 60 updates.
    """
    rm = VerifyRM.from_pretrained(weak_demo_rm, device="cpu", max_length=128)
    torch.manual_seed(seed)
    rm.model.score.reset_parameters()
    learner = RMLearner(rm, lr=1e-3, batch_size=32)
    problems = demo_problems("train")[seed * 48 : seed * 48 + 48]
    requests = [NegativeRequest(p.question(), p.solution(VERIFIABLE_FORMATS[i % 2]), str(p.answer), seed=1000 * seed + i)
                for i, p in enumerate(problems)]
    negatives = write_negatives(PerturbationAssistant(), verifier, requests, max_retries=3).texts
    pairs = [Pair(r.question, r.answer, r.positive, n) for r, n in zip(requests, negatives) if n]
    assert len(pairs) >= 40
    first = learner.update(pairs)
    for _ in range(59):
        last = learner.update(pairs)
    assert last["rm/loss"] < 0.5 * first["rm/loss"], (first, last)
    assert last["rm/train_pair_accuracy"] >= 0.9, (first, last)
    assert learner.skipped == 0


# ---------------------------------------------------------------------------------- the source on a hand-built batch
def batch_of(groups: list[tuple[str, list[str]]], reference: str, verifier, step: int = 0) -> RolloutBatch:
    G = len(groups[0][1])
    completions = [c for _, group in groups for c in group]
    questions = [q for q, group in groups for _ in group]
    return RolloutBatch(
        prompts=questions, completions=completions, completion_ids=[[1]] * len(completions),
        group_ids=[i // G for i in range(len(completions))], num_generations=G,
        columns={"question": questions, "answer": [reference] * len(completions)}, step=step,
        context={"verifier": verifier, "mode": "train"},
    )


FAST = {"backoff_s": 0.01, "timeout_s": 2.0, "max_retries": 1, "deadline_s": 10.0}



def test_endpoint_assistant_faults_drop_pairs_and_are_counted(tiny_rm, verifier, monkeypatch, caplog):
    from tests.helpers.llm_test_server import LLMTestServer

    monkeypatch.delenv("COREWARD_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    # The test server answers "echo: <the user message>": its final answer is the positive's (rejected), unless
    # the question carries a \boxed{} of its own, which wins the extraction (accepted: a wrong answer).
    healthy, failing, echoing = f"{QUESTION} Not \\boxed{{7}}.", f"{QUESTION} (500)", QUESTION
    groups = [(q, ["nothing", POSITIVE]) for q in (healthy, failing, echoing)] + [("no positive", ["#### 3", "x"])]
    with LLMTestServer() as server:
        server.script(USER_TEMPLATE.format(question=failing, positive=POSITIVE), then="500")
        assistant = LLMAssistant(OpenAIEndpointGenerator(server.url, "test-model", **FAST))
        source = CooperReward(rm=str(tiny_rm), assistant=assistant, max_retries=1, device="cpu")
        batch = batch_of(groups, "14", verifier)
        rewards = source.compute(batch)
        assert len(server.bodies) == 2 + 2 + 1  # the 500 is retried by the endpoint (1 retry); the echo twice
        assert {b["temperature"] for b in server.bodies} == {0.7}
        assert server.bodies[0]["messages"][0]["role"] == "system"
    assert len(rewards) == 8 and all(0 < r < 1 for r in rewards)
    m = batch.metrics
    assert m["rm/positive_rate"] == pytest.approx(3 / 4) and m["rm/valid_pair_rate"] == pytest.approx(1 / 4)
    assert m["assistant/failures"] == 1 and m["assistant/rejected"] == 2 and m["assistant/latency"] > 0
    assert source.learner.updates == 1  # the one valid pair trained the RM

    # The endpoint is gone (nothing listens there): every pair is dropped and counted, the step goes on.
    down = CooperReward(rm=str(tiny_rm), assistant={"backend": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1",
                                                    **FAST}, device="cpu")
    batch = batch_of(groups, "14", verifier, step=1)
    with caplog.at_level("WARNING", logger="coreward.rewards.cooper"):
        assert len(down.compute(batch)) == 8
    assert "no assistant request of step 2 gave a negative" in caplog.text  # step 1 done before it: metrics.jsonl's 2
    assert batch.metrics["assistant/failures"] == 3 and batch.metrics["rm/valid_pair_rate"] == 0
    assert down.learner.updates == 0 and "rm/loss" not in batch.metrics
    down.close()


def test_rollout_negatives_pair_each_positive_with_the_rejected_rollout_the_rm_likes_most(tiny_rm, verifier):
    """negative="rollout": no assistant; the negative is the group's wrong rollout of highest score."""
    wrong = ["#### 3", "#### 9", "no answer"]
    groups = [("q1", [POSITIVE, *wrong]), ("q2", ["#### 5", "#### 6", "#### 7", "#### 8"]), ("q3", [POSITIVE] * 4)]
    source = CooperReward(rm=str(tiny_rm), negative="rollout", device="cpu")
    batch = batch_of(groups, "14", verifier)
    scores = source.get_learner().rm.score(["q1"] * 4, ["14"] * 4, [POSITIVE, *wrong])
    pairs = source.make_pairs(batch, scores + [0.5] * 8)
    expected = wrong[max(range(3), key=lambda i: scores[1 + i])]
    assert [(p.positive, p.negative) for p in pairs] == [(POSITIVE, expected)]  # q2: no positive; q3: no negative
    assert batch.metrics["rm/positive_rate"] == pytest.approx(2 / 3)
    assert batch.metrics["rm/valid_pair_rate"] == pytest.approx(1 / 3)
    with pytest.raises(CorewardError, match=r"key params\.negative must be one of \['assistant', 'rollout', 'mixed'\]"):
        CooperReward(rm=str(tiny_rm), negative="policy")


def test_params_are_validated(tmp_path):
    for params, message in [
        ({"positive": "last"}, r"key params\.positive must be one of \['first', 'hardest'\]"),
        ({"lr": 0}, r"params\.lr must be > 0"),
        ({"lr": "fast"}, "params.lr must be a number"),
        ({"max_retries": -1}, r"params\.max_retries must be >= 0"),
        ({"eval_every": 5}, r"params\.eval_data is needed"),
        ({"eval_every": 5, "eval_data": str(tmp_path / "missing.jsonl")}, "eval_data: no such file"),
        ({"batch_size": 1}, r"params\.batch_size must be >= 2"),
        ({"assistant": 3}, r"params\.assistant must be"),
        ({"minibatch_size": 0}, r"params\.minibatch_size must be >= 1"),
        ({"epochs": 0}, r"params\.epochs must be >= 1"),
        ({"warmup_ratio": 2}, r"params\.warmup_ratio must be <= 1"),
        ({"rm_dtype": "float16"}, r"params\.rm_dtype must be one of"),
    ]:
        with pytest.raises(CorewardError, match=message):
            CooperReward(**params)
    assert CooperReward(lr="1e-5").params.lr == 1e-5  # YAML reads 1e-5 as a string
    authors = vars(CooperReward(minibatch_size=4, epochs=2, warmup_ratio=0.01, rm_dtype="bfloat16").params)
    assert {k: authors[k] for k in ("minibatch_size", "epochs", "warmup_ratio", "rm_dtype")} == \
        {"minibatch_size": 4, "epochs": 2, "warmup_ratio": 0.01, "rm_dtype": "bfloat16"}
    assert isinstance(build_assistant("perturb"), PerturbationAssistant)


def test_demo_and_paper_configs():
    from coreward.grpo.config import TrainConfig
    from coreward.runtime.config import load_config, read_yaml

    demo = load_config(TrainConfig, CONFIG, [])
    rule = load_config(TrainConfig, REPO / "configs" / "demo" / "rule.yaml", [])
    assert demo.grpo == rule.grpo and demo.data == rule.data and demo.model == rule.model  # only the reward differs
    assert [r.name for r in demo.rewards] == ["cooper"]
    CooperReward(**demo.rewards[0].params)  # the demo's params are valid
    paper_path = REPO / "configs" / "paper" / "cooper_gsm8k_qwen2.5-1.5b.yaml"
    paper = load_config(TrainConfig, paper_path, [])
    params = paper.rewards[0].params
    assert paper.grpo["num_generations"] == 16 and paper.grpo["learning_rate"] == 1e-6 and paper.grpo["beta"] == 0.001
    assert paper.grpo["max_completion_length"] == 512 and paper.data.max_prompt_tokens == 512
    assert params["lr"] == 1e-5 and params["assistant"]["base_url"].startswith("http")
    assert paper.model.name_or_path == "Qwen/Qwen2.5-1.5B-Instruct" and paper.data.train == "gsm8k"
    CooperReward(**params)
    assert read_yaml(paper_path)["rewards"][0]["name"] == "cooper"


# ---------------------------------------------------------------------------------- real runs
def train(policy: Path, rm: Path, run_dir: Path, max_steps: int, *overrides: str, resume: bool = False):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config

    config = load_config(TrainConfig, CONFIG, [
        f"model.name_or_path={policy}", f"rewards.0.params.rm={rm}", "rewards.0.params.lr=0.001",
        "rewards.0.params.eval_every=2", "data.limit=4", "data.eval_every=0", "grpo.num_generations=4",
        "grpo.per_device_train_batch_size=16", "grpo.max_completion_length=24", "grpo.save_steps=1", *overrides,
    ])
    return run_training(config, output_dir=str(run_dir), max_steps=max_steps, resume=resume)


def rm_weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(directory / RM_DIR / "model.safetensors")


def test_resumed_run_continues_with_the_same_rm_and_optimizer(policy, tiny_rm, tmp_path, monkeypatch):
    updates: list[list[Pair]] = []
    original = RMLearner.update
    monkeypatch.setattr(RMLearner, "update", lambda self, pairs: updates.append(pairs) or original(self, pairs))
    run = tmp_path / "run"
    train(policy, tiny_rm, run, 2)
    resumed = train(policy, tiny_rm, run, 3, resume=True)
    assert resumed.global_step == 3 and len(updates) == 3 and all(updates)  # every step had pairs

    # Replaying step 3's update on checkpoint-2's RM and optimizer gives checkpoint-3's RM exactly: the resumed
    # run went on from the checkpoint. From the initial RM (a fresh start) the same update lands elsewhere.
    def state(step: int) -> Path:
        return run / f"checkpoint-{step}" / "reward_sources" / "cooper"

    settings = {"lr": 1e-3, "weight_decay": 0.01, "batch_size": 32}
    replay = RMLearner.load(state(2), "cpu", **settings)
    assert replay.updates == 2 and all(s["step"] == 2 for s in replay.optimizer.state_dict()["state"].values())
    replay.update(updates[2])
    fresh = RMLearner(VerifyRM.from_pretrained(tiny_rm, device="cpu"), **settings)
    fresh.update(updates[2])
    saved = rm_weights(state(3))
    for name, p in replay.rm.model.named_parameters():
        assert torch.equal(p.detach(), saved[name]), name
    assert any(not torch.allclose(p.detach(), saved[n]) for n, p in fresh.rm.model.named_parameters())

    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    for key in ("rm/loss", "rm/valid_pair_rate", "rm/score_pos", "rm/score_neg", "assistant/latency", "assistant/failures"):
        assert key in rows[-1], key
    # eval_every 2 counts from step 1 (steps 1, 3), and each run's last step is evaluated too: step 2 ended the first
    # run (max_steps 2), step 3 the resumed one
    assert all("rm/pair_accuracy" in row for row in rows)


def test_save_and_load_state_round_trip(tiny_rm, tmp_path):
    pairs = [Pair(QUESTION, "14", POSITIVE, "12+5=17;17-3=14;#### 15")] * 2
    first = CooperReward(rm=str(tiny_rm), device="cpu", lr=1e-3)
    first.get_learner().update(pairs)
    first.save_state(tmp_path)
    second = CooperReward(rm=str(tiny_rm), device="cpu", lr=1e-3)
    second.load_state(tmp_path)
    for a, b in ((first.get_learner(), second.get_learner()),):
        assert (b.updates, b.skipped) == (a.updates, a.skipped) == (1, 0)
        a.update(pairs), b.update(pairs)  # the same moments give the same next step
        for (name, p), q in zip(a.rm.model.named_parameters(), b.rm.model.parameters()):
            assert torch.equal(p, q), name
    fresh = CooperReward(rm=str(tiny_rm), device="cpu", lr=1e-3)
    fresh.load_state(tmp_path / "nothing-saved-here")  # a checkpoint without Cooper state: start from `rm`
    assert fresh.get_learner().updates == 0


# Cooper's variants (rewards/cooper/variants.py) under 2 processes: mixed negatives (the assistant's and the rollout the
# RM scores highest), a replay buffer drawn each step, the anchor to the initial RM and two co-optimized members on
# bootstrap shares of the pairs. Every process must make the same pairs, draw the same replay and deal the members the
# same shares, or the replicas drift apart.
VARIANTS = ("rewards.0.params.negative=mixed", "rewards.0.params.replay_size=16", "rewards.0.params.replay_per_step=2",
            "rewards.0.params.anchor=0.1", "rewards.0.params.members=2", "rewards.0.params.member_split=bootstrap")


def run_workers(policy: Path, rm: Path, out: Path, mode: str) -> list[dict]:
    """`worker` (below) under torchrun on 2 processes for 2 steps; each process's state (rankR.json)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
               __file__, "worker", str(policy), str(rm), str(out), "2", mode]
    done = warm_launch.run(command, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("variants", [False, True], ids=["authors", "variants"])
def test_two_processes_keep_identical_rms_under_a_minibatch_schedule(policy, tiny_rm, tmp_path, variants):
    states = run_workers(policy, tiny_rm, tmp_path, str(variants))
    members = 2 if variants else 1
    ranks = [[load_file(tmp_path / f"rank{r}_member{k}.safetensors") for k in range(members)] for r in range(2)]
    # the authors' kind of schedule (mini-batches of 1 pair, so one process often has none; 2 epochs; warmup)
    assert states[0]["updates"] == states[1]["updates"] and min(states[0]["updates"]) > 2, states
    assert [s["world"] for s in states] == [2, 2]
    assert [s["assistant_calls"] for s in states] == [2, 0]  # once per step, on the main process only
    initial = load_file(tiny_rm / "model.safetensors")
    for k in range(members):
        assert any(not torch.equal(ranks[0][k][n], initial[n]) for n in initial)  # each RM did learn
        for name, weight in ranks[0][k].items():
            assert torch.equal(weight, ranks[1][k][name]), (k, name)  # bitwise identical on both processes
    if variants:
        assert states[0]["replay"] == states[1]["replay"] and states[0]["replay"]["pairs"] > 0, states
        assert states[0]["replay"]["drawn"] > 0  # step 2 learned pairs of step 1 too
        assert states[0]["extra_pairs"] > 0  # mixed: some positives had both an assistant and a rollout negative
        # the members learned different shares: their weights differ
        assert any(not torch.equal(ranks[0][0][n], ranks[0][1][n]) for n in initial)


def local_assistant(policy: Path | str, dtype: str) -> list[str]:
    """Overrides that make Cooper's assistant a local model (llm/hf_local.py, sampling at the authors' 0.7) and run
    the policy and the assistant in `dtype`, with periodic evaluation on (the guard is on by default)."""
    return [f"rewards.0.params.assistant={{backend: hf, model_name_or_path: '{policy}', dtype: {dtype}}}",
            f"model.dtype={dtype}", "data.eval_every=1", "data.eval_limit=4"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_local_assistant_on_two_processes(policy, tiny_rm, tmp_path, dtype):
    """Cooper's assistant as a local model under torchrun (2 gloo processes), the guard and periodic evaluation on,
    in float32 and in bf16: the main process alone loads the model and samples the negatives, both processes learn
    the same pairs (bitwise identical RMs that moved from the start), and every step was evaluated."""
    states = run_workers(policy, tiny_rm, tmp_path, f"local-{dtype}")
    assert [s["assistant_calls"] for s in states] == [2, 0]  # once per step, on the main process only
    assert states[0]["assistant_dtypes"] == [f"torch.{dtype}"] and states[1]["assistant_dtypes"] == []  # never loaded
    assert [s["policy_bf16"] for s in states] == [dtype == "bfloat16"] * 2
    # the local model's sampled texts were asked for, and some were accepted as negatives (its pairs were learned)
    assert states[0]["assistant_steps"] == 2 and states[0]["updates"] == states[1]["updates"] != [0], states
    initial = load_file(tiny_rm / "model.safetensors")
    ranks = [load_file(tmp_path / f"rank{r}_member0.safetensors") for r in range(2)]
    assert any(not torch.equal(ranks[0][n], initial[n]) for n in initial)
    for name, weight in ranks[0].items():
        assert torch.equal(weight, ranks[1][name]), name
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if row.get("step", 0) > 0 and "rm/loss" in row]
    assert len(steps) == 2 and all("assistant/latency" in row and "guard/alarm" in row for row in steps), steps
    # every step was evaluated, and the guard read each evaluation
    assert sum("eval/avg@4" in row and "guard/verified_drop" in row for row in rows) >= 2, rows


def worker(policy: str, rm: str, out: str, steps: str, variants: str) -> None:
    """One process of a 2-process run: 8 completions each, groups of 4, 4 prompts; saves its RMs' weights.
    `variants`: "True" (Cooper's variants), "False" (the authors'), or "local-DTYPE" (a local assistant)."""
    calls, logged, assistant_dtypes = [], [], set()
    get_assistant = CooperReward.get_assistant

    def counted(self):
        calls.append(1)
        assistant = get_assistant(self)
        if isinstance(assistant, LLMAssistant):
            assistant_dtypes.add(str(assistant.generator.model.dtype))
        return assistant

    CooperReward.get_assistant = counted
    log = RolloutBatch.log
    RolloutBatch.log = lambda self, name, value: logged.append((name, value)) or log(self, name, value)
    result = train(Path(policy), Path(rm), Path(out) / "run", int(steps), "grpo.per_device_train_batch_size=8",
                   "grpo.save_steps=100", "rewards.0.params.minibatch_size=1", "rewards.0.params.epochs=2",
                   "rewards.0.params.warmup_ratio=0.5", *(VARIANTS if variants == "True" else ()),
                   *(local_assistant(policy, variants.removeprefix("local-")) if variants.startswith("local-") else ()))
    trainer = result.trainer
    source = trainer.reward_sources[0]
    rank = trainer.accelerator.process_index
    learners = source.member_learners() if variants == "True" else [source.learner]
    for k, learner in enumerate(learners):
        weights = {n: p.detach().contiguous() for n, p in learner.rm.model.state_dict().items()}
        save_file(weights, f"{out}/rank{rank}_member{k}.safetensors")
    state = {"updates": [learner.updates for learner in learners], "world": trainer.accelerator.num_processes,
             "assistant_calls": len(calls)}
    if variants.startswith("local-"):
        state["assistant_dtypes"] = sorted(assistant_dtypes)
        state["assistant_steps"] = sum(1 for name, _ in logged if name == "assistant/latency")
        state["policy_bf16"] = trainer.args.bf16  # bf16 autocast over float32 master weights (runtime/precision.py)
    if variants == "True":
        entries = [(step, pair.positive, pair.negative) for step, pair in source.replay().entries]
        state["replay"] = {"pairs": len(entries), "entries": entries,
                           "drawn": sum(v for name, v in logged if name == "rm/replay_pairs")}
        # mixed: up to two pairs a prompt, so a step with rollout negatives makes more pairs than positives
        rates = dict.fromkeys(("rm/positive_rate", "rm/valid_pair_rate"), 0.0)
        state["extra_pairs"] = sum(v if name == "rm/valid_pair_rate" else -v for name, v in logged if name in rates)
    Path(out, f"rank{rank}.json").write_text(json.dumps(state))


if __name__ == "__main__" and sys.argv[1] == "worker":
    from coreward.runtime.distributed import exit_now, leave_process_group

    worker(*sys.argv[2:7])
    if leave_process_group():  # no interpreter teardown: gloo's threads can abort a finished rank there (exit -6)
        exit_now(0)


# ---------------------------------------------------------------------------------- fidelity options
def test_authors_retry_count_and_answerless_rule(verifier):
    """max_retries=2 is the authors' 3 attempts in all; accept_answerless keeps a text with no answer."""
    script = {"no answer": ["#### 14", "I give up", "nothing to add"], "right": ["#### 14", "\\boxed{14}", "#### 14", "x"]}
    requests = [NegativeRequest(q, POSITIVE, "14", seed=i) for i, q in enumerate(script)]
    assistant = Scripted(script)
    outcome = write_negatives(assistant, verifier, requests, max_retries=2, accept_answerless=True)
    assert outcome.texts == ["I give up", None]
    assert [len(call) for call in assistant.calls] == [2, 2, 1]  # 3 attempts in all for "right"
    rejecting = write_negatives(Scripted(script), verifier, requests[:1], max_retries=2)
    assert rejecting.texts == [None]  # ours: an answerless text is asked again; "nothing to add" has no answer either


def test_binary_reward_thresholds_sigma_and_keeps_nan(tiny_rm):
    source = CooperReward(rm=str(tiny_rm), binary=True, device="cpu")
    assert source._reward([0.2, 0.5, 0.51, float("nan")])[:3] == [0.0, 0.0, 1.0]
    assert math.isnan(source._reward([float("nan")])[0])
    assert CooperReward(rm=str(tiny_rm), device="cpu")._reward([0.2, 0.7]) == [0.2, 0.7]


def test_authors_prompt_and_cut_reach_the_endpoint_and_the_rm(tiny_rm, verifier, monkeypatch):
    from coreward.rewards.cooper.assistant import AUTHORS_SYSTEM_PROMPT, AUTHORS_USER_TEMPLATE
    from tests.helpers.llm_test_server import LLMTestServer

    monkeypatch.delenv("COREWARD_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with LLMTestServer() as server:
        source = CooperReward(rm=str(tiny_rm), device="cpu", assistant_prompt="authors", rm_cut="cooper",
                              assistant={"backend": "openai", "base_url": server.url, "model": "m", **FAST})
        source.compute(batch_of([(f"{QUESTION} Not \\boxed{{7}}.", ["nothing", POSITIVE])], "14", verifier))
        messages = server.bodies[0]["messages"]
    assert messages[0]["content"] == AUTHORS_SYSTEM_PROMPT
    assert messages[1]["content"] == AUTHORS_USER_TEMPLATE.format(question=f"{QUESTION} Not \\boxed{{7}}.", positive=POSITIVE)
    assert source.learner.rm.cut == "cooper" and source.learner.rm.tokenizer.truncation_side == "right"
    source.close()


# Qwen2.5's chat template, reduced to what matters here: each turn ends "<|im_end|>\n"
QWEN_LIKE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_level_tokenizer():
    """A real byte-level BPE tokenizer (any text encodes), eos `<|im_end|>`, with the Qwen-like template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([POSITIVE, QUESTION] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|im_end|>")
    tokenizer.chat_template = QWEN_LIKE
    return tokenizer


def test_authors_negative_form_ends_in_the_templates_newline_and_is_cut_to_the_response_length():
    from coreward.rm.inputs import as_chat_reply, user_message

    tokenizer = byte_level_tokenizer()
    prompt = [{"role": "user", "content": f"{QUESTION} Put the answer after ####."}]
    negative = "12+5=18;18-3=15;#### 15"
    assert as_chat_reply(tokenizer, prompt, negative, 512) == negative + "\n"  # <|im_end|> removed, its "\n" kept
    cut = as_chat_reply(tokenizer, prompt, negative, 4)
    assert negative.startswith(cut) and len(tokenizer(cut, add_special_tokens=False)["input_ids"]) == 4
    assert user_message(prompt) == prompt[0]["content"] and user_message("plain text") == "plain text"


class PolicyTokens:
    """What Cooper reads of the policy for the authors' negative form: its tokenizer and response length."""

    def __init__(self, tokenizer, max_completion_length=512):
        self.tokenizer, self.max_completion_length = tokenizer, max_completion_length
        self.device, self.max_steps = "cpu", 10


def test_authors_question_negative_and_strict_positive_reach_the_pairs(tiny_rm, verifier):
    """question_field="prompt", negative_form="chat", positive_match="gsm8k_strict", retry_failed: the authors'."""
    user = f"{QUESTION} Let's think step by step and output the final answer after \"####\"."
    completions = ["so \\boxed{14}", "12+5=17;17-3=14;#### 14", "#### 3", "x"]  # \boxed{14}: verified, not strict
    batch = RolloutBatch(prompts=[[{"role": "user", "content": user}]] * 4, completions=completions,
                         completion_ids=[[1]] * 4, group_ids=[0] * 4, num_generations=4,
                         columns={"question": [QUESTION] * 4, "answer": ["14"] * 4}, step=0,
                         context={"verifier": verifier, "mode": "train"}, policy=PolicyTokens(byte_level_tokenizer()))
    assistant = Scripted({user: [None, "12+5=18;18-3=15;#### 15"], QUESTION: ["12+5=19;19-3=16;#### 16"]})
    authors = CooperReward(rm=str(tiny_rm), device="cpu", assistant=assistant, question_field="prompt",
                           negative_form="chat", positive_match="gsm8k_strict", retry_failed=True)
    (pair,) = authors.make_pairs(batch, [0.5] * 4)
    assert pair.question == user and pair.positive == completions[1]  # the first *strict* positive
    assert pair.negative == "12+5=18;18-3=15;#### 15\n"  # the failed first attempt was asked again
    assert [len(call) for call in assistant.calls] == [1, 1] and assistant.calls[0][0].answer == "14"

    ours = CooperReward(rm=str(tiny_rm), device="cpu", assistant=assistant)
    (pair,) = ours.make_pairs(batch, [0.5] * 4)
    assert (pair.question, pair.positive, pair.negative) == (QUESTION, completions[0], "12+5=19;19-3=16;#### 16")
    dropped = CooperReward(rm=str(tiny_rm), device="cpu", assistant=Scripted({QUESTION: [None, "#### 16"]}))
    assert dropped.make_pairs(batch, [0.5] * 4) == []  # ours: a failed request is not asked again
    batch.policy = None
    with pytest.raises(CorewardError, match="negative_form 'chat' needs the policy's tokenizer"):
        CooperReward(rm=str(tiny_rm), device="cpu", assistant=Scripted({QUESTION: ["#### 16"]}),
                     negative_form="chat").make_pairs(batch, [0.5] * 4)
