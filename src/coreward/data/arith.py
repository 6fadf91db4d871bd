"""The `arith` task: one-operation arithmetic that a small pretrained chat model sometimes solves.

    What is 14 + 15?   ->   29

Two numbers from 2 to 20 and one of +, -, * (a - b with a >= b): 19 x 19 + 190 + 19 x 19 = 912 distinct
problems. A real model's learning signal needs prompts it sometimes solves: SmolLM2-135M-Instruct, asked with the
papers' instruction (`\\boxed{}`), solves some of these and almost none of harder sets (docs/real_model.md has the
rates). So a GRPO group of 8 often holds a success, and what RL can teach it here (answer in a form the verifier
reads, stop early, get the sum right) is visible within tens of steps.

The test split is 112 problems whose (a, op, b) no train problem has; train is the other 800, in a fixed order.

Co-rewarding-I's second view: `rephrase_arith` words the same operation another way ("Add 14 and 15. What is the
total?"). The task rephrases itself, as the demo does, so that Co-rewarding-I runs without a model that can:
SmolLM2-135M-Instruct and Gemma 3 270M (base) kept 0 of 16 and 0 of 8 rephrasings with the authors' prompt;
Qwen2.5-Coder-1.5B-Instruct kept 48 of 48 and changed the answer of 9 (docs/real_model.md).
"""

from __future__ import annotations

import random
import re
from functools import cache

from coreward.runtime.errors import CorewardError


LOW, HIGH = 2, 20
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
TEST_SIZE = 112
QUESTION = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")
REPHRASINGS = {"+": "Add {a} and {b}. What is the total?", "-": "Take {b} away from {a}. What is left?",
               "*": "Multiply {a} by {b}. What is the product?"}
SEED = 20261128


@cache
def _splits() -> dict[str, tuple[tuple[int, str, int], ...]]:
    problems = [(a, op, b) for op in OPS for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)
                if op != "-" or a >= b]
    random.Random(SEED).shuffle(problems)
    return {"test": tuple(problems[:TEST_SIZE]), "train": tuple(problems[TEST_SIZE:])}


def load_arith(split: str, limit: int | None = None) -> list:
    from coreward.data.records import Record

    if split not in ("train", "test"):
        raise CorewardError(f"unknown arith split {split!r} (known: train, test)")
    return [Record(id=f"arith-{split}-{i:04d}", question=f"What is {a} {op} {b}?", answer=str(OPS[op](a, b)),
                   source="arith", split=split, solution=f"{a} {op} {b} = {OPS[op](a, b)}. The answer is "
                   f"$\\boxed{{{OPS[op](a, b)}}}$.", subject="arithmetic")
            for i, (a, op, b) in enumerate(_splits()[split][:limit])]


def rephrase_arith(question: str) -> str:
    """The same operation in other words: "What is 14 - 5?" -> "Take 5 away from 14. What is left?"."""
    match = QUESTION.fullmatch(question.strip())
    if match is None:
        raise CorewardError(f"not an arith question (What is A op B?): {question!r}")
    a, op, b = match.groups()
    return REPHRASINGS[op].format(a=a, b=b)
