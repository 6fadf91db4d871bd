"""Rules added to match other graders' own test suites (issue 23, item 1) without giving up the
anti-hacking rules (items 2-3): unboxed final sentences, references written as solutions, `;` lists and
`\\pm`, doubled backslashes, and the hedges that stay wrong."""

from __future__ import annotations

import pytest

from coreward.verify import THOUSANDS, Verifier, extract_answer, gold_answer
from coreward.verify.answers import elements, split_unit


@pytest.fixture(scope="module")
def own_verifier():
    with Verifier(num_workers=1) as verifier:
        yield verifier


@pytest.mark.parametrize(
    "text, expected",
    [
        # a conclusion sentence with one value, even without a period before it
        ("P(A) = (1/2) * (4/3) P(A) = 2/3 Therefore, the probability that Alice wins the game is 2/3.", "2/3"),
        ("Therefore, there are 12 distinct arithmetic sequences that meet the three given conditions.", "12"),
        # a formula of names only is not a second value
        ("$y = 8.8 - 2.8 = 6$ So, the ordered pair $(x, y)$ that solves the system is $(7, 6)$.", "(7, 6)"),
        # the value ends the sentence, with a percent, a currency or a short unit after it
        ("$$\\frac{2}{1}.$$ Therefore, the minimum error in the measurement increases by 100%.", "100\\%"),
        ("the number is not 10 which is 1,000.99€", "1000.99"),  # a negated value does not count
        ("not it's not 10 it's 1,000.99m²", "1000.99 m²"),
        # a label and a colon right before the value
        ("Total: 42 apples", "42"),
        ("Soucis : 2,74 $ a..", "2,74"),  # read as 2.74 only with decimal_comma=True
        # what follows an end-of-turn token is another turn; a closing formula is skipped
        ("Thus there are 12 of them. I hope it is correct. <|im_start|>user\nWhat is 3+4?", "12"),
        ("\\boxed{5}<|im_end|><|im_start|>user Is it \\boxed{6}?", "5"),
    ],
)
def test_unboxed_final_sentences(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "so the number is 10 which is 1,000.99m²",  # two values: a hedge
        "Therefore, x is between 3 and 7.",
        "So we have 3 apples and 5 pears.",
        "A common mistake is to write 7.",  # the sentence disowns its value
        "Step 3: 12 + 5 = 17",
        "we get 42 apples",  # no conclusion, no label, a word (not a unit) after the value
        "Answer $ \n 9 \n $",  # inline math does not span a line break
        "Answer \\( \n 9 \n \\)",
        "12+5=17;17-3=14;ans 14",  # one word before the value: the demo's unread format stays unread
        "about 5.",
    ],
)
def test_loose_text_that_stays_unread(text):
    assert extract_answer(text) is None


def test_display_math_still_spans_lines():
    assert extract_answer("Answer \\[ \n 9 \n \\]") == "9"
    assert extract_answer("Answer $$ \n 9 \n $$") == "9"


def test_references_written_as_solutions():
    solution = ("The stock keeps $90 \\%$ of its value on Monday and $80 \\%$ of that on Tuesday. " * 3
                + "Final Answer: The final answer is $28 \\%$. I hope it is correct. Note: The solution "
                "provided is incorrect. The correct approach is as follows:")
    assert gold_answer(solution) == "28 \\%"
    assert gold_answer("\\boxed{1} no no no no no \\boxed{2}") == "2"  # boxes parted by prose: steps
    assert gold_answer("$\\boxed{1}\\boxed{2}$") == "1, 2"  # boxes side by side: one answer
    assert gold_answer("\\boxed{1} and \\boxed{2}") == "1, 2"
    assert extract_answer("\\boxed{1} no no no no no \\boxed{2}") == "1, 2"  # a completion's boxes are a set
    assert gold_answer("185\\") == "185"  # a stray trailing backslash
    assert gold_answer("$-2 \\\\le x \\\\le 7$") == "-2 \\le x \\le 7"  # escaped twice


def test_lists_with_semicolons_plus_minus_and_thin_spaces():
    assert elements("-12;-11;-10") == ["-12", "-11", "-10"]
    assert elements("p=5,q=2;p=7,q=2") == ["(5, 2)", "(7, 2)"]
    assert elements("a=4,\\,-8,\\,-10") == ["a=4", "-8", "-10"]
    assert elements("\\pm 2021") == ["2021", "- 2021"]
    assert elements("1 \\pm \\sqrt{19}") == ["1 + \\sqrt{19}", "1 - \\sqrt{19}"]
    assert elements("\\frac{1 \\pm \\sqrt{5}}{2}") == ["\\frac{1 \\pm \\sqrt{5}}{2}"]  # not top level


def test_one_letter_units():
    assert split_unit("\\frac{3}{4}i") == ("\\frac{3}{4}i", None)  # i is a number, not a unit
    assert split_unit("5 m") == ("5", "m")


def test_thousands_never_start_with_zero():
    assert THOUSANDS.fullmatch("0,111") is None and THOUSANDS.fullmatch("10,111")


RIGHT = [  # (completion, gold)
    ("$\\boxed{\\{-12, -11, -10, -8, -7, -6\\}}$", "$-12;-11;-10;-8;-7;-6$"),
    ("$(5,2),(7,2)$", "$p=5,q=2;p=7,q=2$"),
    ("$\\boxed{-10,-8,4}$", "\\boxed{a=4,\\,-8,\\,-10}"),
    ("${-2021, 2021}$", "$\\pm 2021$"),
    ("\\boxed{1 - \\sqrt{19}, 1 + \\sqrt{19}}", "1 \\pm \\sqrt{19}"),
    ("\\boxed{1 \\pm \\sqrt{19}}", "1 \\pm \\sqrt{19}"),
    ("$x \\in [-2,7]$", "$-2 \\\\le x \\\\le 7$"),
    ("\\begin{bmatrix} 0 & 0 \\\\ 0 & 1 \\end{bmatrix}", "\\begin{pmatrix}0&0\\\\0&1\\end{pmatrix}"),
    ("185\\", "185"),
    ("\\frac{3}{4}i", "\\frac34i"),
    ("the number is not 10 which is 1,000.99€", "1000.99"),
    ("Therefore, there are 12 distinct sequences. I hope it is correct. <|im_start|>user", "$12$"),
]

WRONG = [  # (completion, gold): hedges and other claims that stay wrong
    ("$2021$", "$\\pm 2021$"),  # one of two values
    ("\\boxed{\\pm 2021}", "2021"),  # both signs for a single value: a hedge
    ("$\\boxed{1,2}$", "\\boxed{1} no no no no no \\boxed{2}"),
    ("so the number is 10 which is 1,000.99m²", "1000.99"),
    ("Answer $ \\frac{1}{2} \\$ = \\frac{10}{9} $", "$10/9$"),  # a chain of two values
    ("$x=1/3\\approx1.3$", "$1/3$"),  # 1.3 is not 1/3 to one decimal
    ("\\boxed{3; 5}", "5"),  # a semicolon list is a list
    ("Answer $ \n 9 \n $", "$9$"),
    ("Soucis : 2,74 $ a..", "2.74"),  # a list of two numbers by default
    ("0.111", "0,111"),
]


def test_right(own_verifier):
    results = own_verifier.verify_completions([c for c, _ in RIGHT], [g for _, g in RIGHT])
    assert [case for case, result in zip(RIGHT, results) if not result.correct] == []


def test_wrong(own_verifier):
    results = own_verifier.verify_completions([c for c, _ in WRONG], [g for _, g in WRONG])
    assert [case for case, result in zip(WRONG, results) if result.correct] == []


def test_decimal_comma_option_reads_loose_text_and_golds():
    with Verifier(num_workers=1, decimal_comma=True) as verifier:
        results = verifier.verify_completions(["Soucis : 2,74 $ a..", "0.111", "1.22"], ["2.74", "0,111", "1,22"])
    assert [r.correct for r in results] == [True, True, True]
