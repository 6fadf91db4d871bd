"""The `arith` task (coreward/data/arith.py): the small real models' training set and its held-out split."""

from coreward.data.benchmarks import count_rows, default_instruction, load_benchmark
from coreward.data.prompts import INSTRUCTION
from coreward.verify.verifier import Verifier


def test_the_held_out_split_shares_no_problem_with_train_and_every_answer_is_right():
    train, test = load_benchmark("arith", "train"), load_benchmark("arith", "test")
    assert (len(train), len(test)) == (count_rows("arith", "train"), count_rows("arith", "test")) == (800, 112)
    assert not {r.question for r in train} & {r.question for r in test}
    assert load_benchmark("arith", "train") == train  # a fixed order: the same rows every run
    for record in train + test:
        a, op, b = record.question.removeprefix("What is ").removesuffix("?").split()
        assert int(record.answer) == {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}[op](int(a), int(b)) >= 0
    # a chat model is asked with the papers' instruction, and the reference solution's form verifies
    assert default_instruction("arith") == INSTRUCTION
    results = Verifier().verify_completions([r.solution for r in test[:20]], [r.answer for r in test[:20]])
    assert all(result.correct for result in results)
