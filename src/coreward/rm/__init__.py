"""VerifyRM: the reference-based reward model of Cooper (model, BCE training, hybrid annotation,
evaluation, and the pairwise learner Cooper trains during RL).

    from coreward.rm import VerifyRM
    rm = VerifyRM.from_pretrained("demo")                  # or a directory written by `coreward rm train`
    rm.score(questions, references, completions)           # σ(logit) per completion, no grad
    rm.logits(questions, references, completions)          # with grad, for Cooper's pairwise update

Names are imported on first use, so that `coreward rm --help` does not load torch.
"""

_EXPORTS = {
    "VerifyRM": "coreward.rm.model",
    "format_input": "coreward.rm.model",
    "truncate": "coreward.rm.model",
    "binary_metrics": "coreward.rm.labelled",
    "RMLearner": "coreward.rm.learner",
    "Pair": "coreward.rm.learner",
}
__all__ = ["Pair", "RMLearner", "VerifyRM", "binary_metrics", "format_input", "truncate"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'coreward.rm' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
