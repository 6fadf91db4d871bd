"""Cooper's negative check under `answerless_negative: accept`, on real texts: the authors keep a negative while
`not verify(parse(negative), parse(positive))` (collaborate.py), and math-verify's parse of a whole text reads its
last bare number. So a negative with no answer coreward reads, whose last number is the positive's answer, is
refused (asked again) as they refuse it; one ending in another number, or in none, is kept."""

from __future__ import annotations

from coreward.llm import GenerationResult
from coreward.rewards.cooper.assistant import Assistant, NegativeRequest, write_negatives
from coreward.verify import Verifier, extract_answer


POSITIVE = ("Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72")
SAME_NUMBER = "Natalia sold 48*2 = 96 clips in May but returned 24 of them, so 96-24 = 72"  # wrong steps, right number
OTHER_NUMBER = "Natalia sold 48/4 = 12 clips in May, so she sold 48+12 = 60"
NO_NUMBER = "Natalia sold half as many clips in May, so altogether she sold one and a half times her April clips."
DEMO_FORM = "48/2=24;48+24=72;ans 72"  # the demo policy's `ans r` ending, which coreward's extraction does not read


class Scripted(Assistant):
    """Writes, for each question, the next text of its script (no model: the texts are the point)."""

    def __init__(self, script: dict[str, list[str]]):
        self.script, self.calls = script, 0

    def write(self, requests: list[NegativeRequest]) -> list[GenerationResult]:
        results = [GenerationResult(self.script[r.question][self.calls], None, 0.0) for r in requests]
        self.calls += 1
        return results


def authors_keep(negative: str, positive: str) -> bool:
    """collaborate.py's `is_negative = not verify(parse(negative), parse(positive))` (trusted test texts only)."""
    from math_verify import parse, verify

    return not verify(parse(negative), parse(positive))


def test_accept_refuses_an_unmarked_negative_whose_last_number_is_the_positives_answer(verifier):
    texts = [SAME_NUMBER, OTHER_NUMBER, NO_NUMBER, DEMO_FORM]
    assert [extract_answer(t) for t in texts] == [None] * 4  # none has an answer coreward reads
    requests = [NegativeRequest(f"q{k}", POSITIVE, "72", seed=k) for k in range(len(texts))]
    script = {f"q{k}": [text] for k, text in enumerate(texts)}

    accepting = write_negatives(Scripted(script), verifier, requests, max_retries=0, accept_answerless=True)
    assert accepting.texts == [None, OTHER_NUMBER, NO_NUMBER, None]
    assert accepting.rejected == 2
    assert [text is not None for text in accepting.texts] == [authors_keep(t, POSITIVE) for t in texts]

    rejecting = write_negatives(Scripted(script), verifier, requests, max_retries=0)
    assert rejecting.texts == [None] * 4  # coreward's default: no answer read, asked again

    # a refused text is asked again, as the authors' loop asks again while `is_negative` is False
    again = write_negatives(Scripted({"q": [SAME_NUMBER, OTHER_NUMBER]}), verifier,
                            [NegativeRequest("q", POSITIVE, "72", seed=0)], max_retries=1, accept_answerless=True)
    assert again.texts == [OTHER_NUMBER] and again.rejected == 1


def test_the_whole_text_check_runs_under_the_verifiers_deadline():
    """A text math-verify spends seconds on (an exponent tower; ~6 s in-process) is cut off at the deadline and counts
    as "not equal", so it is kept as a negative, as the authors' parse (5 s timeout, then no answer) keeps it."""
    slow = "Natalia sold $" + "x^{" * 40 + "7" + "}" * 40 + "$ clips\nand more"
    assert extract_answer(slow) is None
    with Verifier(timeout_s=0.3, num_workers=1) as verifier:
        assert verifier.whole_text_equal([slow, SAME_NUMBER], ["72", "72"]) == [(False, True), (True, False)]
        assert verifier.stats.timeouts == 1  # (equal, timed_out): cut off, not parsed to the end
        kept = write_negatives(Scripted({"q": [slow]}), verifier, [NegativeRequest("q", POSITIVE, "72", seed=0)],
                               max_retries=0, accept_answerless=True)
        assert kept.texts == [slow]
