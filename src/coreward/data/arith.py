"""The `arith` task: one-operation arithmetic that a small pretrained chat model sometimes solves.

    What is 14 + 15?   ->   29

Two numbers from 2 to 20 and one of +, -, * (a - b with a >= b): 19 x 19 + 190 + 19 x 19 = 912 distinct
problems. A real model's learning signal needs prompts it sometimes solves: SmolLM2-135M-Instruct, asked with the
papers' instruction (`\\boxed{}`), solves some of these and almost none of harder sets (docs/results.md has the
rates). So a GRPO group of 8 often holds a success, and what RL can teach it here (answer in a form the verifier
reads, stop early, get the sum right) is visible within tens of steps.

The test split is held out by operands: 24 unordered operand pairs {a, b}, chosen at random once, with every problem
built on them (both orders, every operation: 114 problems); train is the 798 problems of the other pairs, so no test
problem has a commuted or re-operated twin in train.

Co-rewarding-I's second view: `rephrase_arith` words the same operation another way ("Add 14 and 15. What is the
total?"). The task rephrases itself, as the demo does, so that Co-rewarding-I runs without a model that can:
small models kept none of their rephrasings with the authors' prompt, and a larger one changed some answers
(studies/2026-11-28-real-model-methods/ has the counts).
"""

from __future__ import annotations

import random
import re
from functools import cache

from coreward.runtime.errors import CorewardError


LOW, HIGH = 2, 20
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
TEST_SIZE = 112  # pairs are taken until the test split holds at least this many problems
QUESTION = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")
REPHRASINGS = {"+": "Add {a} and {b}. What is the total?", "-": "Take {b} away from {a}. What is left?",
               "*": "Multiply {a} by {b}. What is the product?"}
SEED = 20261128
SPLIT_SEED = 20261205


def operand_pair(a: int, b: int) -> tuple[int, int]:
    """The unordered pair a problem is built on: 14 + 15, 15 + 14, 15 - 14 and 14 * 15 share (14, 15)."""
    return min(a, b), max(a, b)


@cache
def _splits() -> dict[str, tuple[tuple[int, str, int], ...]]:
    # the construction registered in docs/preregistration.md (part B, "The split") before any run on it
    problems = [(a, op, b) for op in OPS for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)
                if op != "-" or a >= b]
    random.Random(SEED).shuffle(problems)  # the rows' fixed order within each split
    pairs = [(a, b) for a in range(LOW, HIGH + 1) for b in range(a, HIGH + 1)]
    random.Random(SPLIT_SEED).shuffle(pairs)
    held_out: set[tuple[int, int]] = set()
    for pair in pairs:  # whole operand pairs go to test, so no test problem has a twin in train
        if sum(operand_pair(a, b) in held_out for a, _, b in problems) >= TEST_SIZE:
            break
        held_out.add(pair)
    test = tuple(p for p in problems if operand_pair(p[0], p[2]) in held_out)
    train = tuple(p for p in problems if operand_pair(p[0], p[2]) not in held_out)
    return {"test": test, "train": train}


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
