"""Kept for callers that import from here; the pieces live in their own modules now."""

from coreward.verify.arithmetic import canonical, exact_value, fast_decide
from coreward.verify.budget import is_simple, over_budget, reference_problem
from coreward.verify.pool import math_verify_equal
from coreward.verify.verifier import (
    Verifier,
    VerifierStats,
    VerifyResult,
    check_settings,
    get_verifier,
    is_equivalent,
)


__all__ = ["Verifier", "VerifierStats", "VerifyResult", "canonical", "check_settings", "exact_value", "fast_decide",
           "get_verifier", "is_equivalent", "is_simple", "math_verify_equal", "over_budget", "reference_problem"]
