"""The `arith` task (coreward/data/arith.py): the small real models' training set and its held-out split."""

from coreward.data.benchmarks import count_rows, default_instruction, load_benchmark
from coreward.data.prompts import INSTRUCTION
from coreward.verify.verifier import Verifier


def operands(record) -> tuple[int, int]:
    a, _, b = record.question.removeprefix("What is ").removesuffix("?").split()
    return min(int(a), int(b)), max(int(a), int(b))


def test_the_held_out_split_shares_no_operands_with_train_and_every_answer_is_right():
    train, test = load_benchmark("arith", "train"), load_benchmark("arith", "test")
    assert (len(train), len(test)) == (count_rows("arith", "train"), count_rows("arith", "test")) == (798, 114)
    assert not {r.question for r in train} & {r.question for r in test}
    # held out for real: no test problem's operands, in either order and under any operation, are trained on
    assert not {operands(r) for r in train} & {operands(r) for r in test}
    assert len({r.question.split()[3] for r in test}) == 3  # every operation is tested
    assert load_benchmark("arith", "train") == train  # a fixed order: the same rows every run
    for record in train + test:
        a, op, b = record.question.removeprefix("What is ").removesuffix("?").split()
        assert int(record.answer) == {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}[op](int(a), int(b)) >= 0
    # a chat model is asked with the papers' instruction, and the reference solution's form verifies
    assert default_instruction("arith") == INSTRUCTION
    results = Verifier().verify_completions([r.solution for r in test[:20]], [r.answer for r in test[:20]])
    assert all(result.correct for result in results)


def test_the_task_rephrases_itself_with_the_same_numbers_and_answer():
    """Co-rewarding-I's second view on arith (`rephrasings: arith`): other words, the same operands in the same
    roles, so the rephrased question's answer is the original's; another task's question is refused by name."""
    import re

    import pytest

    from coreward.data.rephrase import task_pairs
    from coreward.runtime.errors import CorewardError

    records = load_benchmark("arith", "train")
    pairs = task_pairs(records, "arith")
    assert len(pairs) == len(records)
    solve = {"Add": lambda a, b: a + b, "Take": lambda b, a: a - b, "Multiply": lambda a, b: a * b}
    for record, rephrased in pairs:
        assert rephrased != record.question and "What is" in rephrased
        assert re.findall(r"\d+", rephrased) == re.findall(r"\d+", record.question)[:: -1 if "-" in record.question else 1]
        a, b = map(int, re.findall(r"\d+", rephrased))
        assert str(solve[rephrased.split()[0]](a, b)) == record.answer
    assert {q.split()[0] for _, q in pairs} == set(solve)  # every operation has its wording
    with pytest.raises(CorewardError, match="rephrase only the arith task's own questions"):
        task_pairs(load_benchmark("demo", "train", limit=1), "arith")


def test_the_real_models_co_rewarding_1_config_pairs_each_question_with_its_rephrasing():
    """configs/smol/co_rewarding_1.yaml's rows: each arith question (view 0) right before its own rephrasing
    (view 1), same pair id and reference, in the model's chat format."""
    from pathlib import Path

    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import build_train_dataset
    from coreward.runtime.config import load_config

    config = load_config(TrainConfig, Path(__file__).parents[2] / "configs" / "smol" / "co_rewarding_1.yaml")
    rows = build_train_dataset(config)
    assert len(rows) == 2 * count_rows("arith", "train")
    for original, rephrased in zip(rows.select(range(0, 40, 2)), rows.select(range(1, 40, 2))):
        assert (original["view"], rephrased["view"]) == (0, 1) and original["pair_id"] == rephrased["pair_id"]
        assert original["answer"] == rephrased["answer"]
        first, second = original["prompt"][-1]["content"], rephrased["prompt"][-1]["content"]
        assert first.startswith("What is") and not second.startswith("What is") and INSTRUCTION in second
