"""The demo task and its tokenizer: deterministic, disjoint splits, correct solutions, faithful rephrasings."""

import re

import pytest

from coreward.data.synthetic import (
    ANSWER_FORMATS,
    MAX_VALUE,
    STEP_WEIGHTS,
    VERIFIABLE_FORMATS,
    DemoProblem,
    demo_answer_format,
    demo_answer_in_any_format,
    demo_problems,
    demo_rephrasing,
    demo_solution,
    load_demo,
    parse_demo,
    rephrase_demo,
)
from coreward.demo.model import build_demo_tokenizer
from coreward.runtime.errors import CorewardError
from coreward.verify import extract_answer


@pytest.fixture(scope="module")
def tokenizer():
    return build_demo_tokenizer()


def test_splits_are_deterministic_and_sized():
    first = load_demo("train", 100)
    demo_problems.cache_clear()
    assert load_demo("train", 100) == first
    assert len(load_demo("train")) == 20_000 and len(load_demo("test")) == 500
    assert load_demo("test", 3) == load_demo("test")[:3]
    assert first[0].source == "demo" and first[0].split == "train" and first[0].id == "demo-train-00000"


def test_splits_are_disjoint_even_in_other_words():
    train, test = demo_problems("train"), demo_problems("test")
    assert len({p.question() for p in train}) == len(train)
    assert not {p.key for p in train} & {p.key for p in test}


def test_solutions_are_correct_arithmetic():
    for record in load_demo("train", 2000):
        *steps, final = record.solution.split(";")
        for step in steps:
            a, op, b, result = re.fullmatch(r"(\d+)([+-])(\d+)=(\d+)", step).groups()
            assert int(result) == (int(a) + int(b) if op == "+" else int(a) - int(b))
            assert all(0 <= int(n) <= 99 for n in (a, b, result))
        assert final == f"#### {record.answer}" and int(steps[-1].split("=")[1]) == int(record.answer)
        assert record.level in ("2 steps", "3 steps")


def test_only_some_answer_formats_are_read_by_the_rule_verifier():
    record = load_demo("test", 1)[0]
    for fmt in ANSWER_FORMATS:
        solution = demo_solution(record, fmt)
        assert demo_answer_in_any_format(solution) == record.answer and demo_answer_format(solution) == fmt
        assert (extract_answer(solution) == record.answer) == (fmt in VERIFIABLE_FORMATS)


def test_rephrasing_keeps_numbers_relations_and_answer():
    for record in load_demo("test"):
        rephrased = demo_rephrasing(record)
        assert rephrased != record.question
        assert re.findall(r"\d+", rephrased) == re.findall(r"\d+", record.question)
        original, other = parse_demo(record.question), parse_demo(rephrased)
        assert other.key == original.key and str(other.answer) == record.answer
        assert (other.template, other.name, other.item) != (original.template, original.name, original.item)
    rephrased = rephrase_demo("Ann has 12 apples, buys 5, sells 3. How many?")
    assert rephrased == "Bob had 12 pens, found 5, lost 3. How many left?"


def test_parse_rejects_other_text():
    with pytest.raises(CorewardError):
        parse_demo("What is 2+2?")


def test_tokenizer_round_trips_task_texts(tokenizer):
    texts = []
    for p in demo_problems("train")[:250]:
        texts += [p.question(), p.rephrased().question(), *(p.solution(fmt) for fmt in ANSWER_FORMATS)]
    texts = texts[:1000] + ["", "Ann has 5 eggs", p.question() + p.solution("boxed")]
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert tokenizer.unk_token_id not in ids, text
        assert tokenizer.decode(ids) == text
    assert len(tokenizer) < 100
    assert tokenizer.tokenize("12;#### 14 \\boxed{7}") == ["1", "2", ";", "####", " 1", "4", " ", "\\boxed{", "7", "}"]


def test_longest_completion_fits_32_tokens(tokenizer):
    """The demo GRPO configs generate at most 32 tokens: the longest possible solution plus EOS must fit."""
    assert max(STEP_WEIGHTS) == 3 and MAX_VALUE < 100
    worst = DemoProblem(10, (("+", 10), ("+", 10), ("+", 10)))  # every number two digits, three steps
    longest = max(len(tokenizer(worst.solution(fmt))["input_ids"]) for fmt in ANSWER_FORMATS)
    assert longest + 1 == 32


def test_chat_template_renders_the_bare_question(tokenizer):
    question = load_demo("test", 1)[0].question
    messages = [{"role": "user", "content": question}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == question
    full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": "#### 1"}], tokenize=False)
    assert full == question + "#### 1" + tokenizer.eos_token

