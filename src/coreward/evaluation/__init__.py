"""Evaluation (avg@n, pass@k, maj@n on math benchmarks), evaluation during training, and run reports.

`evaluate(model, EvalSettings(...))` is the entry point (also `coreward.evaluate` and `coreward eval`); the
metrics, tables and plots are in the modules beside it.
"""

from coreward.evaluation.evaluate import EvalSettings, evaluate


__all__ = ["EvalSettings", "evaluate"]
