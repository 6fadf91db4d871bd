"""Answers as people (and policies) write them (issue 28, item 4): a revised answer marked final, hedging
words after a value, angle units, the degree sign, nested boxes and a box followed by long filler, each read
as its writer meant; and the hedges with two candidate answers, which stay refused."""

from __future__ import annotations

import time

import pytest

from coreward.verify import extract_answer


# ---------------------------------------------------------------------------------------------------------
# A revision: the last box, marked as the final answer (or the earlier one taken back), is the answer
# ---------------------------------------------------------------------------------------------------------

REVISIONS = [
    "First, \\boxed{5}. Wait, that's wrong: 3+4=7, so the final answer is \\boxed{7}.",
    "We get $\\boxed{5}$. Hmm, let me recheck. Actually 3+4 = 7.\n**Final Answer**: $\\boxed{7}$",
    "So $x = \\boxed{5}$.\nLet me double-check.\nFinal Answer: The final answer is $\\boxed{7}$. I hope it is correct.",
    "\\boxed{5}. Wait, that's wrong. It is \\boxed{7}.",  # taken back, no "final" needed
    "\\boxed{5}\nI made a mistake in step 2. Redoing it: 3 + 4 = \\boxed{7}",
    "A common mistake is to write \\boxed{5}; the correct value is \\boxed{7}.",
]


@pytest.mark.parametrize("text", REVISIONS)
def test_a_revised_answer_is_read_as_its_last_box(text, verifier):
    assert extract_answer(text) == "7"
    assert [r.correct for r in verifier.verify_completions([text, text], ["7", "5"])] == [True, False]


HEDGES_BETWEEN_BOXES = [
    "\\boxed{3} or \\boxed{5}",
    "The final answer is \\boxed{3}. Or the final answer is \\boxed{5}.",
    "\\boxed{3}. Maybe the final answer is \\boxed{5}.",
    "So the final answer is \\boxed{3} or \\boxed{5}.",
    "\\boxed{3}. Alternatively, the final answer is \\boxed{5}.",
    "\\boxed{3}. The final answer is \\boxed{3} or \\boxed{5}.",
    "If $x>0$ the answer is \\boxed{3}. If $x<0$ the final answer is \\boxed{5}.",  # one case of two
]


@pytest.mark.parametrize("text", HEDGES_BETWEEN_BOXES)
def test_two_candidate_boxes_stay_refused(text, verifier):
    """Marking one as final does not help a completion that offers another in the same breath."""
    assert extract_answer(text) == "3, 5"
    assert [r.correct for r in verifier.verify_completions([text, text], ["3", "5"])] == [False, False]


def test_disowning_a_box_still_works_and_a_turn_does_not_disown():
    assert extract_answer("A common mistake is to write $\\boxed{7}$.") is None
    # "wrong" before the turn to the conclusion ("so the final answer is") does not disown the box after it
    assert extract_answer("That's wrong, so the final answer is \\boxed{7}.") == "7"
    # a retraction only drops the boxes before it, never the last one: still no free pick
    assert extract_answer("\\boxed{3} or \\boxed{5}. Wait, that's wrong.") == "3, 5"


# ---------------------------------------------------------------------------------------------------------
# Hedging words after (or before) a single value do not change it
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is 12, I think.", "12"),
        ("The answer is 12 (I think).", "12"),
        ("The answer is probably 12.", "12"),
        ("The answer is 12, if I'm not mistaken.", "12"),
        ("Therefore, the answer is $\\frac{1}{2}$, I believe.", "\\frac{1}{2}"),
        ("The total comes to 12, I think.", "12"),
        ("x = 12 probably", "x = 12"),
        ("5 + 7 = 12 probably", "5 + 7 = 12"),
        ("The answer is \\boxed{12}. I think.", "12"),
    ],
)
def test_hedging_words_after_a_value_are_dropped(text, expected, verifier):
    assert extract_answer(text) == expected
    assert [r.correct for r in verifier.verify_completions([text, text], [expected if "frac" in expected else "12",
                                                                        "13"])] == [True, False]


def test_hedging_words_never_make_a_second_value_disappear(verifier):
    for text in ("The answer is 3 or maybe 5.", "The answer is 12, or maybe 13, I think.", "It is either 3 or 5."):
        golds = [g for g in ("3", "5", "12", "13") if g in text]
        results = verifier.verify_completions([text] * len(golds), golds)
        assert not any(r.correct for r in results), text
    # a hedge word that is the whole answer stays the answer
    assert extract_answer("\\boxed{maybe}") == "maybe"
    assert extract_answer("The answer is maybe.") == "maybe"
    assert extract_answer("\\boxed{\\text{probably}}") == "\\text{probably}"


# ---------------------------------------------------------------------------------------------------------
# Angle units: degrees and radians are units, never converted into each other; ° is a degree sign
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gold, pred, expected",
    [
        ("90^\\circ", "\\pi/2 \\text{ radians}", False),  # the same angle in the unit the reference did not use
        ("90^\\circ", "\\frac{\\pi}{2} \\mathrm{rad}", False),
        ("90^\\circ", "90 \\text{ radians}", False),  # the reference's number, the other unit
        ("\\frac{\\pi}{2}", "90^\\circ", False),
        ("90^\\circ", "\\frac{\\pi}{2}", False),  # no unit on the prediction: the values differ
        ("\\frac{\\pi}{2}", "\\frac{\\pi}{2} \\text{ radians}", True),  # a unit on one side only is ignored
        ("90^\\circ", "90", True),
        ("90^\\circ", "90 degrees", True),
        ("90^{\\circ}", "90\\degree", True),
        ("\\angle A = 90^\\circ", "90^\\circ", True),
        ("30^\\circ, 60^\\circ", "60^\\circ, 30^\\circ", True),
    ],
)
def test_angle_units(gold, pred, expected, verifier):
    assert verifier.equivalent([gold], [pred]) == [expected]


@pytest.mark.parametrize(
    "gold, text, expected",
    [
        ("90^\\circ", "\\boxed{90°}", True),
        ("90", "\\boxed{90°}", True),
        ("90", "The angle is 90°.", True),
        ("90^{\\circ}", "So the angle is $90°$.", True),
        ("45^\\circ", "\\boxed{90°}", False),
        ("\\frac{\\pi}{2}", "\\boxed{90°}", False),
    ],
)
def test_the_unicode_degree_sign(gold, text, expected, verifier):
    assert verifier.verify_completions([text], [gold])[0].correct is expected


# ---------------------------------------------------------------------------------------------------------
# Nested boxes
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\boxed{\\boxed{3}}", "3"),
        ("The answer is $\\boxed{\\boxed{\\boxed{3}}}$.", "3"),
        ("\\boxed{ \\fbox{3} }", "3"),
        ("\\boxed{\\boxed{3} + 1}", "\\boxed{3} + 1"),  # a box that is only part of the content stays
    ],
)
def test_nested_boxes_are_unwrapped(text, expected, verifier):
    assert extract_answer(text) == expected
    if expected == "3":
        assert [r.correct for r in verifier.verify_completions([text, text], ["3", "4"])] == [True, False]


# ---------------------------------------------------------------------------------------------------------
# A box followed by long filler
# ---------------------------------------------------------------------------------------------------------

FILLERS = {
    "repetition": " I am done." * 8_000,  # 88,000 characters
    "varied lines": "".join(f"\nLine {i}: nothing more to add here." for i in range(2_500)),
    "braces": "{}" * 30_000,
}


@pytest.mark.parametrize("name", FILLERS)
def test_a_box_followed_by_long_filler_is_read_quickly(name, verifier):
    text = "3 + 4 = 7, so the answer is \\boxed{7}." + FILLERS[name]
    assert len(text) > 50_000
    start = time.perf_counter()
    answer = extract_answer(text)
    elapsed = time.perf_counter() - start
    assert answer == "7"
    assert elapsed < 0.5  # milliseconds in practice; the bound leaves room for a loaded machine
    assert [r.correct for r in verifier.verify_completions([text, text], ["7", "8"])] == [True, False]


def test_filler_after_a_box_is_still_read():
    """The box behind the filler is read with what follows it: a correction there still wins, and a box
    further back than the verifier's clip (100,000 characters) is not looked for."""
    filler = " I am done." * 4_000  # the whole text stays inside the 100,000-character clip
    assert extract_answer("\\boxed{7}" + filler + " The correct value is 8." + filler) == "8"
    assert extract_answer("\\boxed{7}" + "x" * 200_000) is None
    start = time.perf_counter()
    assert extract_answer("no box here " * 100_000) is None  # 1.2 MB without a box
    assert time.perf_counter() - start < 0.5
