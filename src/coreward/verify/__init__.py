"""Rule-based verification: final-answer extraction and math-verify equivalence under a hard deadline.

    from coreward.verify import Verifier, extract_answer
    with Verifier(timeout_s=3.0) as verifier:
        results = verifier.verify_completions(completions, golds)   # [VerifyResult(correct, extracted, timed_out)]
"""

from coreward.verify.equivalence import (
    Verifier,
    VerifierStats,
    VerifyResult,
    get_verifier,
    is_equivalent,
)
from coreward.verify.extract import extract_answer

__all__ = ["Verifier", "VerifierStats", "VerifyResult", "extract_answer", "get_verifier", "is_equivalent"]
