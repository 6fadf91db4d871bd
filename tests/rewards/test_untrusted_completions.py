"""Model output is untrusted input: megabyte completions, NUL bytes, invalid UTF-8 (lone surrogates), code-like
and template-like text, pathological LaTeX go through extraction, verification, the RM template, Cooper's
assistant prompt, an endpoint's request body and the chat template. Nothing executes, nothing hangs, memory
stays bounded, and every reward is a number.

(The extraction-level fuzz and megabyte-input timing tests are in test_verify.py.)
"""

from __future__ import annotations

import math
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coreward.rewards.base import RolloutBatch
from coreward.verify import Verifier
from coreward.verify.extract import clip_completion, encodable


REPO = Path(__file__).resolve().parents[2]
PWNED = Path("/tmp/coreward-untrusted-pwned")
CODE = f"__import__('os').system('touch {PWNED}'); eval(\"open('{PWNED}', 'w')\")"

PATHOLOGICAL = {
    "megabyte, right answer at the end": "x" * 2_000_000 + "\n#### 5",
    "megabyte of open boxes": "\\boxed{" * 300_000,
    "NUL bytes": "\x00" * 10_000 + "\\boxed{5}\x00",
    "lone surrogates (invalid UTF-8)": "\udcff\udcfe step one \ud800 #### 5",
    "code": f"{CODE}\n\\boxed{{{CODE}}}",
    "templates": "{question} {positive} {0} %s %(x)s ${HOME} {{ 7*7 }} {% for i in range(10**9) %}x{% endfor %} #### 5",
    "nested LaTeX": "\\boxed{" + "(" * 500 + "5" + ")" * 500 + "}",
    "exponent tower": "\\boxed{10^{10^{10^{10}}}}",
    "empty": "",
    "whitespace": " \n\t " * 1000,
}


def batch_of(completions: list[str], verifier, G: int = 2) -> RolloutBatch:
    n = len(completions)
    return RolloutBatch(
        prompts=[f"p{i // G}" for i in range(n)], completions=completions, completion_ids=[[1, 2]] * n,
        group_ids=[i // G for i in range(n)], num_generations=G,
        columns={"question": ["2+3=?"] * n, "answer": ["5"] * n, "id": [f"q{i // G}" for i in range(n)]},
        context={"verifier": verifier, "mode": "train"},
    )


def pairs_of_each() -> list[str]:
    """Each pathological completion next to a plain right one (groups of 2: Cooper finds positives)."""
    return [text for bad in PATHOLOGICAL.values() for text in (bad, "2+3=5;#### 5")]


def test_every_reward_is_a_number_and_nothing_executes(tiny_rm_path, verifier):
    from coreward.rewards.cooper import CooperReward
    from coreward.rewards.majority import MajorityVoteReward
    from coreward.rewards.model import ModelReward
    from coreward.rewards.rule import RuleReward

    PWNED.unlink(missing_ok=True)
    completions = pairs_of_each()
    start = time.perf_counter()
    sources = [RuleReward(), MajorityVoteReward(), MajorityVoteReward(match="exact"),
               ModelReward(path=str(tiny_rm_path), device="cpu"), CooperReward(rm=str(tiny_rm_path), device="cpu")]
    for source in sources:
        batch = batch_of(completions, verifier)
        rewards = source.compute(batch)
        assert len(rewards) == len(completions)
        for name, reward in zip([n for n in PATHOLOGICAL for _ in range(2)], rewards):
            assert isinstance(reward, float) and math.isfinite(reward), (source.name, name, reward)
    cooper = sources[-1].get_learner()
    assert cooper.updates == 1 and cooper.skipped == 0  # it learned from pairs made of these texts
    assert time.perf_counter() - start < 60
    assert not PWNED.exists()
    right = RuleReward().compute(batch_of(completions, verifier))
    named = dict(zip(PATHOLOGICAL, right[::2]))
    assert named["megabyte, right answer at the end"] == 1.0
    assert named["NUL bytes"] == 1.0 and named["lone surrogates (invalid UTF-8)"] == 1.0
    assert named["code"] == named["nested LaTeX"] == named["exponent tower"] == named["empty"] == 0.0


def test_verifier_clips_long_completions_to_their_tail_and_counts_them():
    with Verifier(num_workers=1, max_completion_chars=1_000) as clipped:
        results = clipped.verify_completions(["x" * 3_000_000 + " #### 5", "#### 5", "\\boxed{5}" + "x" * 2_000], ["5"] * 3)
        assert [r.correct for r in results] == [True, True, False]  # the third answer was cut away with its head
        assert clipped.stats.truncated == 2
    assert clip_completion("abc", 2) == "bc" and clip_completion("abc", None) == "abc" and clip_completion(None, 5) == ""
    with pytest.raises(ValueError):
        Verifier(max_completion_chars=0)


@pytest.mark.parametrize("size", [1_000_000, 8_000_000])
def test_memory_does_not_grow_with_completion_length(size, verifier):
    """Verifying eight completions of 1 MB or of 8 MB allocates the same bounded amount (the inputs aside)."""
    completions = [chr(ord("a") + i) * size + " #### 5" for i in range(8)]
    tracemalloc.start()
    verifier.verify_completions(completions, ["5"] * 8)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    limit = 8 * verifier.max_completion_chars * 4 + 1_000_000  # one clipped copy each, at most 4 bytes a char
    assert peak < limit, (size, peak)


def test_trainer_clips_completions_before_any_reward_and_counts_them(memorized_policy, tmp_path):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics

    config = load_config(TrainConfig, REPO / "configs" / "demo" / "rule.yaml", [
        f"model.name_or_path={memorized_policy}", "data.limit=4", "data.eval_every=0", "grpo.num_generations=4",
        "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=24", "torch_threads=1",
        "verifier.max_completion_chars=8",  # shorter than any solution: "...;#### 58" is cut to "#### 58"
    ])
    result = run_training(config, output_dir=str(tmp_path / "run"), max_steps=2)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[0]["faults/truncated_completions"] == 8 and rows[1]["faults/truncated_completions"] == 16
    assert all(len(c) <= 8 for c in result.trainer.last_batch.completions)
    assert rows[0]["verified_accuracy"] + rows[1]["verified_accuracy"] > 0  # the tail kept the final answer


def test_rm_reads_any_text(tiny_rm_path):
    from coreward.rm.model import VerifyRM, format_input

    rm = VerifyRM.from_pretrained(tiny_rm_path, device="cpu", max_length=128)
    texts = list(PATHOLOGICAL.values())
    scores = rm.score(["2+3=?\udcff"] * len(texts), ["5\x00"] * len(texts), texts)
    assert all(math.isfinite(s) and 0 < s < 1 for s in scores)
    assert len(format_input("q", "5", "x" * 5_000_000)) < 2_000  # Cooper's cut: first 500 + last 1,000


def test_templates_keep_untrusted_text_literal():
    from coreward.data.prompts import build_messages, render_prompt
    from coreward.demo.model import build_demo_tokenizer
    from coreward.rewards.cooper.assistant import LLMAssistant, NegativeRequest

    evil = PATHOLOGICAL["templates"]
    rendered = render_prompt(build_demo_tokenizer(), build_messages(evil, instruction=None))
    assert evil in rendered and "49" not in rendered  # jinja did not evaluate `{{ 7*7 }}` inside the content

    class Capture:
        def generate(self, requests):
            self.requests = requests
            return []

    generator = Capture()
    LLMAssistant(generator).write([NegativeRequest(evil, evil, "5", 0)])
    [request] = generator.requests
    assert request.messages[1]["content"].count(evil) == 2  # str.format substituted, never re-parsed


def test_endpoint_request_with_invalid_unicode_is_sent():
    from coreward.llm import GenerationRequest, OpenAIEndpointGenerator
    from tests.helpers.llm_test_server import LLMTestServer

    with LLMTestServer() as server, OpenAIEndpointGenerator(server.url, "m", backoff_s=0.01, timeout_s=2.0,
                                                            max_retries=1, deadline_s=10.0) as generator:
        [result] = generator.generate([GenerationRequest.user("solve \udcff this \ud800 #### 5")])
    assert result.ok, result.error
    assert result.text == "echo: solve ? this ? #### 5"


_ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())
_PIECES = ["\\boxed{", "{", "}", "####", "answer is ", "\x00", "\udcff", "{{", "}}", "%s", "{0}", "5", "\n", "$"]


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.text(alphabet=_ANY_CHAR, max_size=300), st.lists(st.sampled_from(_PIECES), max_size=80).map("".join)),
       st.integers(min_value=1, max_value=400))
def test_fuzz_rm_template_and_clipping(text, max_chars):
    from coreward.rm.model import format_input

    clipped = clip_completion(text, max_chars)
    assert len(clipped) <= max_chars and text.endswith(clipped)
    rendered = format_input(text, text, text)
    rendered.encode("utf-8")  # always valid Unicode, whatever came in
    assert encodable(rendered) is rendered
    _tokenizer().encode(rendered)  # the fast tokenizer accepts it


_TOKENIZER = []


def _tokenizer():
    if not _TOKENIZER:
        from coreward.demo.model import build_demo_tokenizer

        _TOKENIZER.append(build_demo_tokenizer())
    return _TOKENIZER[0]
