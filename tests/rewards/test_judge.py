"""The `judge` reward (a generative verifier) against a real OpenAI-compatible server in the test process, whose
"model" is a rule: it finds the reference and the candidate where each published verifier's prompt puts them,
calls the candidate right when its last number equals the reference, and replies in that verifier's own words.
So a test passes only if coreward's prompt places the fields where the verifier reads them and coreward reads the
verdict the verifier writes."""

from __future__ import annotations

import json
import math
import re
import socket

import pytest

from coreward.rewards import build_source
from coreward.rm.judge import JUDGE_FORMATS, parse_compassverifier, parse_general_verifier, parse_xverify
from coreward.runtime.errors import CorewardError
from tests.helpers.batches import batch_of
from tests.helpers.llm_test_server import LLMTestServer
from tests.helpers.runs import coreward_here


# where each format's prompt holds (reference, candidate), read as the verifier reads its training prompts
LAYOUTS = {
    "plain": r"Reference answer: (.*)\n\nSolution: (.*)\n\nIs the final answer",
    "xverify": r'Output sentence: """(.*)"""\n\nCorrect answer: (.*)\n\nJudgement:\n$',
    "compassverifier": r"<Standard Answer Begin>:\n(.*)\n<Standard Answer End>\n<Candidate's Answer Begin>: \n(.*)\n<Cand",
    "compassverifier_cot": r"<Standard Answer Begin>\n(.*)\n<Standard Answer End>\n\n<Candidate's Answer Begin>\n(.*)\n<Cand",
    "general_verifier": r"### Ground Truth Answer: (.*)\n\n### Student Answer: (.*)\n\nFor the above question",
}
REPLIES = {  # (right, wrong) in each verifier's words, as its model card shows them
    "plain": ("YES", "NO"),
    "xverify": ("Correct", "Incorrect"),
    "compassverifier": ("A", "B"),
    "compassverifier_cot": ("Analysis step by step: ...\n\nFinal Judgment: \\boxed{A} - CORRECT",
                            "Analysis step by step: ...\n\nFinal Judgment: \\boxed{B} - INCORRECT"),
    "general_verifier": ("Final Decision: Yes", "Final Decision: No"),
}
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def rule_judge(prompt: str) -> str:
    """The server's "model": which format asked, then right iff the candidate's last number is the reference."""
    for name, layout in LAYOUTS.items():
        found = re.search(layout, prompt, re.S)
        if found:
            reference, candidate = found.groups()
            if name == "xverify":
                candidate, reference = reference, candidate
            numbers = NUMBER.findall(candidate)
            right = bool(numbers) and float(numbers[-1]) == float(reference)
            return REPLIES[name][0 if right else 1]
    return "I cannot tell."


@pytest.fixture(scope="module")
def judge_server():
    with LLMTestServer(reply=rule_judge) as server:
        yield server


@pytest.fixture(autouse=True)
def no_api_key_from_env(monkeypatch):
    monkeypatch.delenv("COREWARD_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def judge(server: LLMTestServer, **params):
    spec = {"backend": "openai", "base_url": server.url, "model": "test-model", "backoff_s": 0.01, "max_retries": 1,
            "timeout_s": 5.0, "deadline_s": 20.0}
    return build_source("judge", {"judge": spec, **params})


def demo_batch(groups, verifier, answers):
    batch = batch_of(groups, verifier, answers)
    batch.columns["question"] = [f"Ann has {a} pens. How many?" for a in answers for _ in groups[0]]
    return batch


# the demo's formats: `#### r` the rule verifier reads, `ans r` it does not
RIGHT_READ, RIGHT_UNREAD = "12+5=17;17-3=14;#### 14", "12+5=17;17-3=14;ans 14"
WRONG_READ, WRONG_UNREAD = "12+5=17;17-3=13;#### 13", "12+5=17;17-3=15;ans 15"


@pytest.mark.parametrize("format", sorted(JUDGE_FORMATS))
def test_each_format_is_asked_and_read_as_its_verifier_writes(judge_server, verifier, format):
    source = judge(judge_server, format=format)
    batch = demo_batch([[RIGHT_READ, RIGHT_UNREAD, WRONG_READ, WRONG_UNREAD]], verifier, ["14"])
    try:
        rewards = source.compute(batch)
    finally:
        source.close()
    assert rewards == [1.0, 1.0, 0.0, 0.0]  # the judge reads `ans 14`, which the rule verifier cannot
    assert batch.metrics["judge/calls"] == 4 and batch.metrics["judge/failures"] == 0
    assert batch.metrics["judge/agreement"] == 0.75 and batch.metrics["judge/overturned"] == 1


def test_identical_prompts_are_asked_once_per_step(verifier):
    with LLMTestServer(reply=rule_judge) as server:
        source = judge(server)  # plain: shown the final answer, so equal answers make equal prompts
        groups = [[RIGHT_READ, "5+9=14;#### 14", WRONG_READ, RIGHT_READ], [RIGHT_READ, WRONG_READ, WRONG_READ, RIGHT_READ]]
        batch = demo_batch(groups, verifier, ["14", "20"])
        rewards = source.compute(batch)
        assert rewards == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
        # group 0: answers 14 and 13; group 1 (another question): 14 and 13 again: 4 distinct prompts for 8 rollouts
        assert batch.metrics["judge/calls"] == 4 and batch.metrics["judge/judged"] == 8
        assert sorted(server.seen.values()) == [1, 1, 1, 1]
        source.compute(demo_batch(groups, verifier, ["14", "20"]))  # the next step asks again
        assert sorted(server.seen.values()) == [2, 2, 2, 2]
        source.close()


def test_hybrid_asks_only_where_the_rule_rejects(judge_server, verifier):
    source = judge(judge_server, mode="hybrid", format="general_verifier")
    batch = demo_batch([[RIGHT_READ, RIGHT_UNREAD, WRONG_READ, WRONG_UNREAD, RIGHT_READ]], verifier, ["14"])
    rewards = source.compute(batch)
    source.close()
    assert rewards == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert batch.metrics["judge/judged"] == 3 and batch.metrics["judge/calls"] == 3  # the rule accepted the others
    # of the rule's 3 rejections, the judge overturned one (`ans 14`) and agreed on two
    assert batch.metrics["judge/overturned"] == 1 and batch.metrics["judge/agreement"] == pytest.approx(2 / 3)


def test_a_failing_judge_scores_incorrect_or_skips_and_counts(verifier):
    with LLMTestServer(reply=lambda prompt: "Let me think about it.") as server:
        unreadable = judge(server, mode="hybrid")
        batch = demo_batch([[RIGHT_READ, RIGHT_UNREAD, WRONG_UNREAD]], verifier, ["14"])
        assert unreadable.compute(batch) == [1.0, 0.0, 0.0]  # the rule's acceptance stands; no verdict: incorrect
        assert batch.metrics["judge/failures"] == 2 and "judge/agreement" not in batch.metrics
        unreadable.close()
    with LLMTestServer(reply=rule_judge) as server:
        skipping = judge(server, on_failure="skip")
        batch = demo_batch([[RIGHT_UNREAD, WRONG_READ]], verifier, ["14"])
        prompts = [skipping.judge.prompt(q, "14", c, v.extracted) for q, c, v in
                   zip(batch.columns["question"], batch.completions, batch.verdicts())]
        server.script(prompts[0], then="500")  # the endpoint fails on the first rollout's prompt, every try
        rewards = skipping.compute(batch)
        skipping.close()
    assert math.isnan(rewards[0]) and rewards[1] == 0.0
    assert batch.metrics["judge/failures"] == 1 and server.seen[prompts[0]] == 2  # tried, retried once, given up


def test_verdicts_of_published_verifiers_are_read_as_their_authors_read_them():
    # CompassVerifier's README: A correct, B incorrect, C invalid (counted incorrect); the CoT's boxed letter wins
    assert [parse_compassverifier(t) for t in ("A", "B", "C", "Final Judgment: \\boxed{A} - CORRECT")] == [1, 0, 0, 1]
    assert parse_compassverifier("CORRECT") == 1 and parse_compassverifier("INCORRECT") == 0  # not the letter C
    assert parse_compassverifier("I am not sure.") is None
    assert [parse_xverify(t) for t in ("Correct", " incorrect\n", "[Correct]", "Correct, because")] == [1, 0, 1, None]
    assert parse_general_verifier("... Final Decision: No. Wait. Final Decision: Yes") == 1
    assert parse_general_verifier("Final Decision: No") == 0 and parse_general_verifier("Yes") is None


def closed_port() -> int:
    with socket.socket() as s:  # bound then released: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_judge_endpoint_that_is_down_stops_the_run_before_training(tmp_path, judge_server):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    source = build_source("judge", {"judge": f"{url}#verifier"})
    with pytest.raises(CorewardError, match=f"judge: its judge cannot give verdicts: LLM endpoint {url} is not reach"):
        source.preflight()
    build_source("judge", {"judge": f"{judge_server.url}#test-model"}).preflight()  # one that answers passes
    with pytest.raises(CorewardError, match="does not serve model 'other'"):
        build_source("judge", {"judge": f"{judge_server.url}#other"}).preflight()
    result = coreward_here("train", "--config", "configs/demo/rule.yaml", "--output-dir", tmp_path / "run",
                           "--max-steps", "1", "--set", "rewards.0.name=judge",
                           "--set", f"rewards.0.params.judge={url}#verifier", "--set", "data.eval_every=0")
    assert result.returncode == 2 and f"LLM endpoint {url} is not reachable" in result.stderr
    assert not (tmp_path / "run").exists()


def test_params_are_checked():
    with pytest.raises(CorewardError, match=r"rewards\.0\.params\.judge must name the judge LLM"):
        build_source("judge", {})
    with pytest.raises(CorewardError, match=r"rewards\.0\.params\.format"):
        build_source("judge", {"judge": "http://h/v1", "format": "nope"})


def test_a_short_training_run_with_the_judge_reward(judge_server, memorized_policy, tmp_path):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config

    before = sum(judge_server.seen.values())
    overrides = [f"model.name_or_path={memorized_policy}", "data.limit=4", "data.eval_every=0",
                 "grpo.num_generations=4", "grpo.per_device_train_batch_size=16", "grpo.max_completion_length=32",
                 "torch_threads=1", "rewards.0.name=judge", f"rewards.0.params.judge={judge_server.url}#test-model"]
    config = load_config(TrainConfig, "configs/demo/rule.yaml", overrides)
    run_training(config, output_dir=str(tmp_path / "run"), max_steps=2)
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "judge/calls" in s]
    assert len(steps) == 2
    for step in steps:
        assert step["judge/judged"] == 16 and 1 <= step["judge/calls"] <= 16 and step["judge/failures"] == 0
        # the server's judge reads every number the rule verifier reads: it never rejects what the rule accepts
        assert step["judge/accept_rate"] >= step["verified_accuracy"] - 1e-9
    assert sum(judge_server.seen.values()) - before == sum(s["judge/calls"] for s in steps)
    # a policy that knows its 4 problems repeats its answers: fewer calls than rollouts over the run
    assert sum(s["judge/calls"] for s in steps) < 32


def test_a_local_model_as_the_judge(memorized_policy, verifier):
    # a policy that writes arithmetic, not verdicts: asked (in hybrid mode only about the rule's rejection), its
    # replies are read as no verdict and counted, and the rollout scores incorrect
    source = build_source("judge", {"judge": str(memorized_policy), "mode": "hybrid", "max_tokens": 4})
    batch = demo_batch([[RIGHT_READ, RIGHT_UNREAD]], verifier, ["14"])
    assert source.compute(batch) == [1.0, 0.0]
    assert batch.metrics["judge/calls"] == 1 and batch.metrics["judge/failures"] == 1
    source.close()


def test_rm_eval_compares_rule_rm_and_judge_on_the_same_rows(judge_server, tiny_rm_path, tmp_path):
    rows = [(RIGHT_READ, 1), (RIGHT_UNREAD, 1), ("5+9=14;ans 14", 1), (WRONG_READ, 0), (WRONG_UNREAD, 0)]
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(json.dumps({"question": "Ann has 12 pens, buys 5, sells 3. How many?",
                                        "reference_answer": "14", "completion": c, "label": y}) + "\n"
                            for c, y in rows))
    before = sum(judge_server.seen.values())
    result = coreward_here("rm", "eval", "--data", data, "--rm", "rule", "--rm", tiny_rm_path,
                           "--judge", f"{judge_server.url}#test-model", "--output", tmp_path / "metrics.json")
    assert result.returncode == 0, result.stdout + result.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert list(metrics) == ["rule", str(tiny_rm_path), "judge", "hybrid"]
    assert all(m["n"] == 5 for m in metrics.values())
    rule, judge_, hybrid = metrics["rule"], metrics["judge"], metrics["hybrid"]
    # the rule verifier is precise but misses the two right answers it cannot read; the judge reads them
    assert (rule["tp"], rule["fn"], rule["fp"], rule["precision"]) == (1, 2, 0, 1.0)
    assert judge_["accuracy"] == 1.0 and hybrid["recall"] == 1.0 > rule["recall"]
    assert sum(judge_server.seen.values()) - before == 5  # one pass of the judge gives both of its columns
    assert "judge" in result.stdout and "hybrid" in result.stdout


def test_cooper_positives_chosen_by_the_judge(judge_server, tiny_rm_path, verifier):
    from coreward.rewards.cooper import CooperReward

    groups = [[WRONG_READ, RIGHT_UNREAD, WRONG_UNREAD, RIGHT_READ], [WRONG_READ, RIGHT_UNREAD, WRONG_UNREAD, WRONG_READ]]
    judge_spec = {"backend": "openai", "base_url": judge_server.url, "model": "test-model"}
    by_rule = CooperReward(rm=str(tiny_rm_path), negative="rollout", device="cpu")
    by_judge = CooperReward(rm=str(tiny_rm_path), negative="rollout", device="cpu", positive_match="hybrid",
                            positive_judge=judge_spec, positive_judge_format="general_verifier")
    rule_pairs = by_rule.make_pairs(demo_batch(groups, verifier, ["14", "14"]), [0.5] * 8)
    batch = demo_batch(groups, verifier, ["14", "14"])
    judge_pairs = by_judge.make_pairs(batch, [0.5] * 8)
    assert [p.positive for p in rule_pairs] == [RIGHT_READ]  # the second group has no answer the rule reads right
    assert [(p.positive, p.negative) for p in judge_pairs] == [(RIGHT_UNREAD, WRONG_READ)] * 2  # the first accepted
    assert batch.metrics["judge/judged"] == 7 and batch.metrics["rm/positive_rate"] == 1.0  # the rule's 1 not asked
    by_judge.close()
    down = CooperReward(rm=str(tiny_rm_path), positive_match="judge", positive_judge=f"http://127.0.0.1:{closed_port()}/v1")
    with pytest.raises(CorewardError, match="judge: its judge cannot give verdicts: LLM endpoint .* is not reachable"):
        down.preflight()
    with pytest.raises(CorewardError, match="positive_judge must name the judge LLM with positive_match 'judge'"):
        CooperReward(rm=str(tiny_rm_path), positive_match="judge")


def test_coreward_eval_with_a_judge(judge_server, memorized_policy, tmp_path):
    import pandas as pd

    result = coreward_here("eval", "--model", memorized_policy, "--benchmarks", "demo", "--n", "2", "--limit", "6",
                           "--output", tmp_path / "eval", "--judge", f"{judge_server.url}#test-model",
                           "--judge-format", "xverify")
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    samples = pd.read_parquet(tmp_path / "eval" / "samples.parquet")
    judge_ = results["judge"]
    assert results["settings"]["judge_mode"] == "hybrid" and results["settings"]["judge_format"] == "xverify"
    # hybrid: the judge is asked about the rule's rejections only and can only add to what the rule accepts
    assert judge_["judged"] == int((~samples["rule_correct"]).sum()) and judge_["failures"] == 0
    assert (samples["correct"] >= samples["rule_correct"]).all()
    assert judge_["overturned"] == int((samples["correct"] & ~samples["rule_correct"]).sum())
    assert results["benchmarks"]["demo"]["avg@2"] == pytest.approx(samples["correct"].mean())
    assert "judge (hybrid)" in result.stdout
