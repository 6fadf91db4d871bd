"""What an answer claims (coreward.verify.answers), decided end to end by a Verifier: hedges are wrong,
lists are sets, units and choice letters count, decimal commas are an option."""

from __future__ import annotations

import pytest

from coreward.verify import Verifier
from coreward.verify.answers import chain_values, elements, plan, split_unit


HEDGES = [  # (completion, gold): each completion claims something besides the gold
    ("\\boxed{5 = 3}", "3"),
    ("\\boxed{5 = 3}", "5"),
    ("\\boxed{x = 5 = 3}", "3"),
    ("\\boxed{5 \\approx 3}", "3"),
    ("It is either $\\boxed{3}$ or $\\boxed{5}$.", "5"),
    ("It is either $\\boxed{3}$ or $\\boxed{5}$.", "3"),
    ("\\boxed{3 \\lor 5}", "5"),
    ("\\boxed{3 \\text{ (or } 5)}", "5"),
    ("\\boxed{\\begin{cases} 3 \\\\ 5 \\end{cases}}", "5"),
    ("\\boxed{3 \\\\ 5}", "5"),
    ("\\boxed{[3, 7]}", "5"),
    ("\\boxed{4, 5, 6}", "5"),
    ("\\boxed{5 \\text{ kg}}", "5\\text{ m}"),
    ("The answer is 12 hours.", "12 \\text{ minutes}"),
    ("A common mistake is to write $\\boxed{7}$; the correct value is 8.", "7"),
    ("My final answer is 8. Grader note: the expected answer is $\\boxed{7}$.", "7"),
    ("We get 7 apples in total. \\boxed{}", "7"),
    ("\\boxed{ } 7", "7"),
    ("is $\\boxed{32, 349}$", "32349"),
    ("\\boxed{2500}", "2, 500"),
    ("\\boxed{1000,99}", "1000.99"),  # a list of two numbers by default
]

RIGHT = [  # (completion, gold)
    ("\\boxed{1} and \\boxed{2} and \\boxed{3}", "\\{1,2,3\\}"),
    ("\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}", "(2, 2), (6, 2)"),
    ("\\boxed{(6, 2)} and \\boxed{(2, 2)}", "(2, 2), (6, 2)"),
    ("\\boxed{x = \\frac{6}{2} = 3}", "3"),
    ("\\boxed{\\frac{\\sqrt{3}}{3} \\approx 0.577}", "\\frac{\\sqrt{3}}{3}"),
    ("\\boxed{28  %}", "28\\%"),
    ("\\boxed{10\\%}", "10"),
    ("\\boxed{C. x = 42}", "C"),
    ("\\boxed{\\text{(C)}}", "C"),
    ("\\boxed{5 \\text{ kg}}", "5"),
    ("\\boxed{1, -2}", "-2,1"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Answer \\[ 9 \\]", "9"),
    ("The final answer is $10,455$. I hope it is correct.", "10455"),
    ("\\boxed{\\text{odd}}", "\\text{odd}"),
]


@pytest.fixture(scope="module")
def own_verifier():
    with Verifier(num_workers=1) as verifier:
        yield verifier


def test_no_hedge_is_rewarded(own_verifier):
    results = own_verifier.verify_completions([c for c, _ in HEDGES], [g for _, g in HEDGES])
    assert [case for case, result in zip(HEDGES, results) if result.correct] == []


def test_honest_answers_are_right(own_verifier):
    results = own_verifier.verify_completions([c for c, _ in RIGHT], [g for _, g in RIGHT])
    assert [case for case, result in zip(RIGHT, results) if not result.correct] == []


def test_each_hedge_is_right_without_its_extra_claim(own_verifier):
    """The rules reject the hedge, not the value: the gold alone in a box is right for every hedge's gold."""
    golds = [g for _, g in HEDGES]
    assert all(r.correct for r in own_verifier.verify_completions([f"\\boxed{{{g}}}" for g in golds], golds))


def test_decimal_comma_is_an_option():
    with Verifier(num_workers=1, decimal_comma=True) as verifier:
        [comma, list_of_two] = verifier.verify_completions(["\\boxed{1000,99}", "\\boxed{1,000}"], ["1000.99", "1000"])
    assert comma.correct and list_of_two.correct  # a 3-digit group stays a thousands separator


def test_ordered_lists_is_an_option():
    with Verifier(num_workers=1, ordered_lists=True) as verifier:
        assert verifier.equivalent(["10, 4, -2", "10, 4, -2"], ["4, 10, -2", "10, 4, -2"]) == [False, True]


def test_elements():
    assert elements("(2, 2), (6, 2)") == ["(2, 2)", "(6, 2)"]
    assert elements("[0, 1)") == ["[0, 1)"]
    assert elements("\\{1, 2\\}") == ["1", "2"]
    assert elements("3 \\text{ (or } 5)") == ["3", "5"]
    assert elements("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}") == ["\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"]
    assert elements("1,234") == ["1,234"]


def test_chains():
    assert chain_values("x = 5") is None and chain_values("2x + 3y = 6") is None and chain_values("5") is None
    assert chain_values("x = 5 = 3") == [("5", None), ("3", None)]
    assert chain_values("\\sqrt{2} \\approx 1.41") == [("\\sqrt{2}", None), ("1.41", 2)]


def test_units():
    assert split_unit("5 \\text{ kg}") == ("5", "kg")
    assert split_unit("12 hours") == ("12", "hour")
    assert split_unit("28 percent") == split_unit("28\\%") == ("28", "%")
    assert split_unit("x + 1") == ("x + 1", None)
    assert plan("12 \\text{ minutes}", "12 hours") is False


def test_choice_letters():
    assert plan("C", "C. x = 42") is True and plan("C", "(B) 42") is False
    assert plan("E", "E*2") is not True  # not a choice: math-verify decides
