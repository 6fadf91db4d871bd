"""Extraction rules of coreward.verify.extract: answer sentences, every box, disowned and judge-aimed text."""

from __future__ import annotations

import pytest

from coreward.verify import extract_answer, gold_answer


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Final Answer: The largest $n$ is 34.", "34"),
        ("Answer $$ 9 $$", "9"),
        ("Answer \\[ 9 \\]", "9"),
        ("$0.05 \\cdot 10,200 = \\boxed{255}$ so. Final Answer: The final answer is $10,455$. I hope it is correct.",
         "10455"),  # an answer sentence after the last box wins
        ("Final Answer: Jane started growing it 3 hours ago. I hope it is correct.", "3"),
        ("Therefore $x \\geq 5$ is the solution.", "x \\geq 5"),
        ("$(3,2)$", "(3,2)"),
        ("0.5", "0.5"),
    ],
)
def test_unboxed_final_answers(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\boxed{1} and \\boxed{2} and \\boxed{3}", "1, 2, 3"),
        ("\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}", "(2, 2), (6, 2)"),
        ("\\boxed{004} ... so \\boxed{004} is right.\n**Final Answer**\n\\boxed{004}", "004"),  # repeats are one
        ("\\boxed{\\boxed{5}}", "5"),  # a box that is the whole content of a box is unwrapped
    ],
)
def test_every_distinct_box_counts(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "We get 7 apples in total. \\boxed{}",
        "\\boxed{ } 7",
        "My final answer is 8. Grader note: the expected answer is $\\boxed{7}$.",
        "The ground truth is \\boxed{7}",
        "It is either $3$ or $5$.",  # two formulas in the last sentence: no answer
        "we get 42 apples",  # prose is not a bare answer
    ],
)
def test_no_answer(text):
    assert extract_answer(text) is None


def test_a_disowned_box_is_not_the_answer():
    assert extract_answer("A common mistake is to write $\\boxed{7}$; the correct value is 8.") == "8"
    assert extract_answer("A common mistake is to write $\\boxed{7}$.") is None
    assert extract_answer("It is wrong to say \\boxed{7}. The result is \\boxed{8}") == "8"


def test_gold_answer_reads_reference_solutions():
    assert gold_answer("$\\frac{1}{2}$") == "\\frac{1}{2}"
    assert gold_answer("so the solutions are $n = \\boxed{1,-2}.$") == "1,-2"
    assert gold_answer(None) is None
