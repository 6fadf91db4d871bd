"""VerifyRM: the reference-based reward model (model, BCE training, hybrid annotation, evaluation, sharding on
the policy's engine). The pairwise learner Cooper trains during RL is Cooper's: rewards/cooper/learner.py.

    from coreward.rm import VerifyRM
    rm = VerifyRM.from_pretrained("demo")                  # or a directory written by `coreward rm train`
    rm.score(questions, references, completions)           # σ(logit) per completion, no grad
    rm.logits(questions, references, completions)          # with grad, for a learner's update

Names are imported on first use, so that `coreward rm --help` does not load torch.
"""

_EXPORTS = {
    "VerifyRM": "coreward.rm.model",
    "format_input": "coreward.rm.model",
    "truncate": "coreward.rm.model",
    "binary_metrics": "coreward.rm.labelled",
}
__all__ = ["VerifyRM", "binary_metrics", "format_input", "truncate"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'coreward.rm' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
