"""Rule-based verification: final-answer extraction and math-verify equivalence, one verdict for every caller.

    from coreward.verify import Verifier, extract_answer
    with Verifier() as verifier:
        results = verifier.verify_completions(completions, golds)   # [VerifyResult(correct, extracted, timed_out)]

Modules: boxes (finding `\\boxed{}`), extract (the final answer), answers (what an answer claims: lists,
chains, units, choice letters), arithmetic (exact fast path), budget (what may reach math-verify), pool
(math-verify in workers under a deadline), verifier (the `Verifier`). docs/reference/verifier.md has the rules.
"""

from coreward.verify.arithmetic import canonical
from coreward.verify.boxes import THOUSANDS, boxes, drop_thousands_separators, last_boxed, unescaped_braces
from coreward.verify.budget import reference_problem
from coreward.verify.extract import clean_answer, clip_completion, encodable, extract_answer, gold_answer
from coreward.verify.verifier import (
    Verifier,
    VerifierStats,
    VerifyResult,
    check_settings,
    get_verifier,
    is_equivalent,
)


__all__ = ["THOUSANDS", "Verifier", "VerifierStats", "VerifyResult", "boxes", "canonical", "check_settings",
           "clean_answer", "clip_completion", "drop_thousands_separators", "encodable", "extract_answer",
           "get_verifier", "gold_answer", "is_equivalent", "last_boxed", "reference_problem", "unescaped_braces"]
