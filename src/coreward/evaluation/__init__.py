"""Evaluation (avg@n, pass@k, maj@n on math benchmarks), evaluation during training, and run reports."""

from coreward.evaluation.evaluate import (
    PAPER_BENCHMARKS,
    BenchmarkResult,
    EvalResults,
    Sample,
    evaluate,
    majority_correct,
    pass_at_k,
)
from coreward.evaluation.tables import comparison_table, render_table, results_table

__all__ = [
    "PAPER_BENCHMARKS",
    "BenchmarkResult",
    "EvalResults",
    "Sample",
    "comparison_table",
    "evaluate",
    "majority_correct",
    "pass_at_k",
    "render_table",
    "results_table",
]
