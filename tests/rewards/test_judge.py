"""The `judge` reward (a generative verifier) against a real OpenAI-compatible server in the test process, whose
"model" is a rule: it finds the reference and the candidate where each published verifier's prompt puts them,
calls the candidate right when its last number equals the reference, and replies in that verifier's own words.
So a test passes only if coreward's prompt places the fields where the verifier reads them and coreward reads the
verdict the verifier writes.

The prompts coreward ships (plain, CompassVerifier's) are pinned by sha256, whole and assembled for one triple. The
two it may not ship (xVerify's, General-Reasoner's: their licences) are read from the user's file; here the tests
write stand-ins that keep only the authors' field layout, and the authors' own texts are pinned by their hashes: a
test checks a user's copy against them (COREWARD_JUDGE_PROMPTS, a folder with clones of the authors' repositories;
skipped without it), and the code warns when a user's file differs from them."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import socket
from pathlib import Path

import pytest

from coreward.rewards import build_source
from coreward.rm.judge import (
    JUDGE_FORMATS,
    Judge,
    parse_compassverifier,
    parse_general_verifier,
    parse_xverify,
    read_template,
)
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


# Stand-ins for the prompts coreward does not ship: the authors' field layout (what LAYOUTS reads), not their text
STAND_INS = {
    "xverify": 'Judge the output sentence against the correct answer (test stand-in).\n\nQuestion: """{question}"""'
               '\n\nOutput sentence: """{output}"""\n\nCorrect answer: {answer}\n\nJudgement:\n',
    "general_verifier": "User: ### Question: {question}\n\n### Ground Truth Answer: {ground_truth}\n\n"
                        "### Student Answer: {student_answer}\n\nFor the above question (test stand-in). Assistant:",
}


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("judge_templates")
    for name, text in STAND_INS.items():
        (folder / f"{name}.txt").write_text(text)
    return {name: folder / f"{name}.txt" for name in STAND_INS}


def with_template(format: str, params: dict, stand_ins: dict[str, Path]) -> dict:
    """`params` with the stand-in template file where the format's prompt is not shipped."""
    return {**params, "template": str(stand_ins[format])} if format in stand_ins else params


def judge(server: LLMTestServer, stand_ins: dict[str, Path] | None = None, **params):
    spec = {"backend": "openai", "base_url": server.url, "model": "test-model", "backoff_s": 0.01, "max_retries": 1,
            "timeout_s": 5.0, "deadline_s": 20.0}
    return build_source("judge", with_template(params.get("format", "plain"), {"judge": spec, **params}, stand_ins or {}))


def demo_batch(groups, verifier, answers):
    batch = batch_of(groups, verifier, answers)
    batch.columns["question"] = [f"Ann has {a} pens. How many?" for a in answers for _ in groups[0]]
    return batch


# the demo's formats: `#### r` the rule verifier reads, `ans r` it does not
RIGHT_READ, RIGHT_UNREAD = "12+5=17;17-3=14;#### 14", "12+5=17;17-3=14;ans 14"
WRONG_READ, WRONG_UNREAD = "12+5=17;17-3=13;#### 13", "12+5=17;17-3=15;ans 15"


@pytest.mark.parametrize("format", sorted(JUDGE_FORMATS))
def test_each_format_is_asked_and_read_as_its_verifier_writes(judge_server, verifier, stand_ins, format):
    source = judge(judge_server, stand_ins, format=format)
    source.preflight()  # the template reads, the endpoint answers
    batch = demo_batch([[RIGHT_READ, RIGHT_UNREAD, WRONG_READ, WRONG_UNREAD]], verifier, ["14"])
    before = len(judge_server.bodies)
    try:
        rewards = source.compute(batch)
    finally:
        source.close()
    assert rewards == [1.0, 1.0, 0.0, 0.0]  # the judge reads `ans 14`, which the rule verifier cannot
    assert batch.metrics["judge/calls"] == 4 and batch.metrics["judge/failures"] == 0
    assert batch.metrics["judge/agreement"] == 0.75 and batch.metrics["judge/overturned"] == 1
    # as its authors deliver it: General-Reasoner's raw "User: ... Assistant:" text as a completion's prompt (no chat
    # template); the others as the user message of a chat
    bodies = judge_server.bodies[before:]
    if format == "general_verifier":
        assert all(set(b) >= {"prompt"} and "messages" not in b and b["prompt"].startswith("User: ### Question:")
                   and b["prompt"].endswith("Assistant:") for b in bodies)
    else:
        assert all("prompt" not in b and [m["role"] for m in b["messages"]] == ["user"] for b in bodies)


# sha256 of each format's template as its authors publish it (coreward's own for plain): a hash, not the text
AUTHORS_SHA256 = {
    "plain": "2d700a95e4b5d8ef73f3a65a01baa7edfa0b1744965e8359e14810e271b264db",
    "xverify": "d8a5d3999c304b5ac64690bda8e21444d74cc45ee029078d2141c468ee1179f1",  # judge_prompt.py PROMPT
    "compassverifier": "aee9c27520639ca543f0b5077164dc32c1976be0f16c87bee7055f3b7ba45e72",
    "compassverifier_cot": "3d7456fb730b7517ca1f3bc1a28a3cc8847522ea6cc721a4d709f28bd07b4a10",
    "general_verifier": "5db841af5eef8a3f80ec8f463873ac4a77737e4205331b064d937313d505425a",
}
# ... and of the prompt each assembles for TRIPLE (shows: completion, the whole text)
TRIPLE = ("Ann has 12 pens, buys 5 and sells 3. How many pens does she have?", "14", "12+5=17;17-3=14;#### 14")
ASSEMBLED_SHA256 = {  # each checked against the authors' own `TEMPLATE.format(...)` of their files
    "plain": "110dbe5445ae04354844c0d9e91fcf175f61d4e2f9950d19b3bc1ee5cb5a0215",
    "xverify": "98b2577f69a8d134a96790ce9b7f263672a8d5fec66d49d5e491a2a5a6c07792",
    "compassverifier": "aca705b540fa8419bdcaa1477d8b05e305ce0d090062eecf723c462b0c0d20f2",
    "compassverifier_cot": "30f464b8d0801cdf5e78ff596214f20e0050b06e95bdac354b6f5eb5da21881f",
    "general_verifier": "0d7e3f45c07e37c57c543bfe7fce27627a025e7831a0aa5425399da098e9e9c9",
}
# the authors' files in clones of their repositories, under $COREWARD_JUDGE_PROMPTS
AUTHORS_FILES = {"xverify": "xVerify/src/xVerify/prompts/judge_prompt.py", "general_verifier": "General-Reasoner/verifier.py"}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def assembled(format: str, template: str | Path | None = None) -> str:
    return Judge("http://unused/v1", format, shows="completion", template=template).prompt(*TRIPLE, "14")


@pytest.mark.parametrize("format", sorted(JUDGE_FORMATS))
def test_each_prompt_is_its_authors_text(format):
    """A shipped template is pinned whole and assembled; an unshipped one is refused in one line that says where its
    authors publish it, and the code checks users' copies against the pinned hash."""
    fmt = JUDGE_FORMATS[format]
    if fmt.template is not None:
        assert sha256(read_template(format, None)) == AUTHORS_SHA256[format]
        assert sha256(assembled(format)) == ASSEMBLED_SHA256[format]
    else:
        with pytest.raises(CorewardError, match=rf"^key x\.template: the {format} prompt is not shipped with coreward "
                                                rf"\(its authors' licence: .*\): clone https://github\.com/\S+ and give its "
                                                rf"file <clone>/{re.escape(AUTHORS_FILES[format].split('/', 1)[1])} "
                                                rf"as template "):
            read_template(format, None, key="key x.template")
    if fmt.authors is not None:
        assert fmt.authors.sha256[0] == AUTHORS_SHA256[format]


@pytest.mark.parametrize("format", sorted(AUTHORS_FILES))
def test_a_users_copy_of_the_authors_prompt_is_checked_against_its_hash(format, caplog):
    root = os.environ.get("COREWARD_JUDGE_PROMPTS")
    if not root:
        pytest.skip("COREWARD_JUDGE_PROMPTS (a folder with clones of xVerify and General-Reasoner) is not set")
    path = Path(root) / AUTHORS_FILES[format]
    with caplog.at_level(logging.WARNING, logger="coreward.runtime.authors_text"):
        text = read_template(format, path)
    assert sha256(text) == AUTHORS_SHA256[format] and not caplog.records
    assert sha256(assembled(format, path)) == ASSEMBLED_SHA256[format]


def test_a_template_file_that_differs_from_the_authors_is_warned_about(tmp_path, caplog):
    shipped = read_template("compassverifier", None)
    rule = "2. ONLY compare the FINAL ANSWER - COMPLETELY IGNORE any potential errors in the REASONING PROCESSES.\n"
    assert rule in shipped
    as_authors = tmp_path / "prompts.py"  # their file, as a clone holds it: the template read from its variable
    as_authors.write_text(f'CV_PROMPT = """{shipped}"""\n\nOTHER = "x"\n'.replace("\\", "\\\\"))
    edited = tmp_path / "edited.txt"
    edited.write_text(shipped.replace(rule, ""))
    with caplog.at_level(logging.WARNING, logger="coreward.runtime.authors_text"):
        assert read_template("compassverifier", as_authors) == shipped and not caplog.records
        assert read_template("compassverifier", edited) == shipped.replace(rule, "")
    assert len(caplog.records) == 1 and "is not the authors' text of the compassverifier prompt" in caplog.records[0].getMessage()
    broken = tmp_path / "broken.txt"
    broken.write_text("Question: {question}\nReference: {reference}\n")  # not the format's placeholders
    with pytest.raises(CorewardError, match=r"^template: .*broken\.txt is not a compassverifier template"):
        read_template("compassverifier", broken)
    with pytest.raises(CorewardError, match=r"^template: no such file: .*missing\.txt \(the xverify prompt: https://"):
        read_template("xverify", tmp_path / "missing.txt")


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


def test_hybrid_asks_only_where_the_rule_rejects(judge_server, verifier, stand_ins):
    source = judge(judge_server, stand_ins, mode="hybrid", format="general_verifier")
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


KEY = "reward 'judge': key rewards.0.params"


def test_a_judge_endpoint_that_is_down_stops_the_run_before_training(judge_server):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    source = build_source("judge", {"judge": f"{url}#verifier"})
    with pytest.raises(CorewardError, match=f"^{KEY}.judge: the judge cannot give verdicts: LLM endpoint {url} is not "
                                            "reachable"):
        source.preflight()
    build_source("judge", {"judge": f"{judge_server.url}#test-model"}).preflight()  # one that answers passes
    with pytest.raises(CorewardError, match=f"^{KEY}.judge: .*does not serve model 'other'"):
        build_source("judge", {"judge": f"{judge_server.url}#other"}).preflight()


def test_a_local_judge_is_checked_before_training(tmp_path, memorized_policy, monkeypatch):
    """Every judge that is not an endpoint loads, from its files alone, before step 0: errors name the key, in one
    line; the demo's model is refused (it writes arithmetic, not verdicts), not looked up on the hub."""
    def refused(params: dict, key: str = f"{KEY}.judge") -> str:
        with pytest.raises(CorewardError) as caught:
            build_source("judge", params).preflight()
        message = str(caught.value)
        assert message.startswith(f"{key}: ") and "\n" not in message, message
        return message

    build_source("judge", {"judge": str(memorized_policy)}).preflight()  # a saved model loads
    assert "no such directory" in refused({"judge": str(tmp_path / "no_such_model")})
    assert "names a demo model, which writes arithmetic, not verdicts" in refused({"judge": "demo"})
    assert "names a demo model" in refused({"judge": {"backend": "hf", "model_name_or_path": "demo:1"}},
                                           f"{KEY}.judge.model_name_or_path")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((memorized_policy / "config.json").read_text())  # no weights
    assert "has a config.json but no weights" in refused({"judge": str(broken)})
    # a hub id while the hub is offline: the local cache or one line (no retries, no transformers traceback)
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub_cache"))
    assert "is a hub id, the hub is offline (HF_HUB_OFFLINE) and it is not in the local cache" in refused(
        {"judge": "coreward-tests/no-such-judge"})
    # the template: a format coreward does not ship needs the user's file, named by its own key
    assert "the xverify prompt is not shipped with coreward" in refused(
        {"judge": str(memorized_policy), "format": "xverify"}, f"{KEY}.template")


@pytest.mark.parametrize("judge_spec", ["endpoint_down", "demo"])
def test_coreward_train_stops_on_a_bad_judge_before_any_model_loads(tmp_path, judge_spec):
    spec = f"http://127.0.0.1:{closed_port()}/v1#verifier" if judge_spec == "endpoint_down" else judge_spec
    result = coreward_here("train", "--config", "configs/demo/rule.yaml", "--output-dir", tmp_path / "run",
                           "--max-steps", "1", "--set", "rewards.0.name=judge",
                           "--set", f"rewards.0.params.judge={spec}", "--set", "data.eval_every=0")
    assert result.returncode == 2, result.stdout + result.stderr
    expected = "is not reachable" if judge_spec == "endpoint_down" else "names a demo model"
    errors = [line for line in result.stderr.splitlines() if f"{KEY}.judge: " in line]
    assert len(errors) == 1 and expected in errors[0], result.stderr
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


def test_a_judge_that_never_answers_is_in_health_json_with_the_steps_of_metrics_jsonl(memorized_policy, tmp_path,
                                                                                     caplog):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config

    with LLMTestServer(reply=lambda prompt: "Let me think about it.") as server:  # no verdict, ever
        overrides = [f"model.name_or_path={memorized_policy}", "data.limit=4", "data.eval_every=0",
                     "grpo.num_generations=4", "grpo.per_device_train_batch_size=16", "grpo.max_completion_length=32",
                     "torch_threads=1", "rewards.0.name=judge", f"rewards.0.params.judge={server.url}#test-model"]
        config = load_config(TrainConfig, "configs/demo/rule.yaml", overrides)
        with caplog.at_level(logging.WARNING, logger="coreward.rewards.judge"):
            run_training(config, output_dir=str(tmp_path / "run"), max_steps=2)
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [s["step"] for s in logged if "judge/calls" in s]
    warned = [int(re.search(r"no verdict in step (\d+)", r.getMessage()).group(1)) for r in caplog.records
              if "no verdict in step" in r.getMessage()]
    assert steps == [1, 2] and warned == steps  # the warnings number steps as metrics.jsonl does
    health = json.loads((tmp_path / "run" / "health.json").read_text())
    assert health["judge_silent"] == 2 and health["judge_steps"] == 2
    assert any("LLM judge: steps with no verdict at all (every request failed or unreadable): 2 of 2" in line
               for line in health["lines"])
    assert any(w.startswith("warning: step 1: the LLM judge gave no verdict") for w in health["warnings"])


def test_a_local_model_as_the_judge(memorized_policy, verifier):
    # a policy that writes arithmetic, not verdicts: asked (in hybrid mode only about the rule's rejection), its
    # replies are read as no verdict and counted, and the rollout scores incorrect
    source = build_source("judge", {"judge": str(memorized_policy), "mode": "hybrid", "max_tokens": 4})
    batch = demo_batch([[RIGHT_READ, RIGHT_UNREAD]], verifier, ["14"])
    assert source.compute(batch) == [1.0, 0.0]
    assert batch.metrics["judge/calls"] == 1 and batch.metrics["judge/failures"] == 1
    source.close()


def test_a_local_judge_reads_a_raw_prompt_as_it_is(memorized_policy):
    """general_verifier's raw text reaches a local model untemplated (as vLLM's `generate(prompt)` reads it), chat
    requests in the same call through the chat template, each answer in its request's place."""
    import torch

    from coreward.llm import GenerationRequest, HFLocalGenerator

    generator = HFLocalGenerator(str(memorized_policy), device="cpu", batch_size=4)
    # the demo tokenizer's template writes the message as it is: one with a frame, so templated and raw text differ
    generator.tokenizer.chat_template = "Q: {{ messages[0]['content'] }}\nA:"
    texts = ["Ann has 12 pens, buys 5, sells 3. How many?", "Bo has 7 cups and breaks 2. How many?"]
    requests = [GenerationRequest.user(texts[0], temperature=0.0, max_tokens=12, raw=True),
                GenerationRequest.user(texts[1], temperature=0.0, max_tokens=12),
                GenerationRequest.user(texts[1], temperature=0.0, max_tokens=12, raw=True)]
    results = generator.generate(requests)
    tokenizer, model = generator.tokenizer, generator.model

    def greedy(prompt: str, special_tokens: bool) -> str:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=special_tokens)
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)

    chat = generator._prompt(requests[1].messages)
    assert generator.use_chat_template and chat != texts[1]  # the chat request is templated: the two differ
    assert [r.text for r in results] == [greedy(texts[0], True), greedy(chat, False), greedy(texts[1], True)]
    generator.close()


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


def test_cooper_positives_chosen_by_the_judge(judge_server, tiny_rm_path, verifier, stand_ins):
    from coreward.rewards.cooper import CooperReward

    groups = [[WRONG_READ, RIGHT_UNREAD, WRONG_UNREAD, RIGHT_READ], [WRONG_READ, RIGHT_UNREAD, WRONG_UNREAD, WRONG_READ]]
    judge_spec = {"backend": "openai", "base_url": judge_server.url, "model": "test-model"}
    by_rule = CooperReward(rm=str(tiny_rm_path), negative="rollout", device="cpu")
    by_judge = CooperReward(rm=str(tiny_rm_path), negative="rollout", device="cpu", positive_match="hybrid",
                            positive_judge=judge_spec, positive_judge_format="general_verifier",
                            positive_judge_template=str(stand_ins["general_verifier"]))
    rule_pairs = by_rule.make_pairs(demo_batch(groups, verifier, ["14", "14"]), [0.5] * 8)
    batch = demo_batch(groups, verifier, ["14", "14"])
    judge_pairs = by_judge.make_pairs(batch, [0.5] * 8)
    assert [p.positive for p in rule_pairs] == [RIGHT_READ]  # the second group has no answer the rule reads right
    assert [(p.positive, p.negative) for p in judge_pairs] == [(RIGHT_UNREAD, WRONG_READ)] * 2  # the first accepted
    assert batch.metrics["judge/judged"] == 7 and batch.metrics["rm/positive_rate"] == 1.0  # the rule's 1 not asked
    by_judge.close()
    down = CooperReward(rm=str(tiny_rm_path), positive_match="judge", positive_judge=f"http://127.0.0.1:{closed_port()}/v1")
    with pytest.raises(CorewardError, match=r"^reward 'cooper': key rewards\.params\.positive_judge: the judge cannot "
                                            "give verdicts: LLM endpoint .* is not reachable"):
        down.preflight()
    with pytest.raises(CorewardError, match="positive_judge must name the judge LLM with positive_match 'judge'"):
        CooperReward(rm=str(tiny_rm_path), positive_match="judge")


def test_coreward_eval_with_a_judge(judge_server, memorized_policy, tmp_path, stand_ins):
    import pandas as pd

    result = coreward_here("eval", "--model", memorized_policy, "--benchmarks", "demo", "--n", "2", "--limit", "6",
                           "--output", tmp_path / "eval", "--judge", f"{judge_server.url}#test-model",
                           "--judge-format", "xverify", "--judge-template", stand_ins["xverify"])
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


def test_a_local_judge_is_planned_at_its_batch_and_request_length_and_an_endpoint_not_at_all():
    """A local judge holds its weights and one batch's cache: its batch size (hf_local's 8 by default, or the
    generator dict's) of its prompt's template + an RM input + the reply's budget, not 32 x 2,048 tokens (3 GiB of
    SmolLM2's cache where its requests need 0.2)."""
    from coreward.rewards.judge import JudgeReward
    from coreward.rewards.memory import LOCAL_LLM_BATCH, RM_TAGS_AND_REFERENCE, PlannedRun
    from coreward.rm.judge import JUDGE_FORMATS
    from coreward.runtime.memory import ModelShape, kv_cache_bytes, parameter_count

    shape = ModelShape.from_path("demo", "policy")
    run = PlannedRun(key="rewards.0", on_gpu=False, engine="one", processes=1, policy=shape,
                     policy_weights_dtype="float32", policy_compute_dtype="float32", lora=False, kl_reference=False,
                     rows=8, seq_len=40, completions=32, groups=4)

    def planned(judge, **params):
        return JudgeReward.memory_needs(JudgeReward.Params(judge=judge, **params), run).items

    plain = JUDGE_FORMATS["plain"]
    tokens = min(40 + RM_TAGS_AND_REFERENCE + len(plain.template) + plain.max_tokens, shape.max_position_embeddings)
    (local,) = planned("demo")
    assert local.bytes == (parameter_count(shape, "lm") * 4 + kv_cache_bytes(shape, LOCAL_LLM_BATCH, tokens, "float32"))
    assert f"{LOCAL_LLM_BATCH} sequences x {tokens} tokens" in local.note
    (batched,) = planned({"backend": "hf", "model": "demo", "batch_size": 2})
    assert "2 sequences" in batched.note and batched.bytes < local.bytes
    assert planned("http://localhost:8000/v1#judge") == []  # an endpoint's memory is elsewhere
