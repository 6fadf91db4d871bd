"""What an RM-based reward (`cooper`, `model`) pays the policy's current rollouts, logged each training step:
how it ranks the rule-accepted against the rule-rejected ones, and what it pays the wrong answer a group repeats
most (rm/evaluate.py's `rollout_pair_accuracy` and `rollout_score_diagnostics`). Logging only: the rewards and
the RM's updates do not read them. studies/2026-11-27-reward-collapse/reward_collapse.py shows them per step, beside the pairs
Cooper made (rm/pairs_assistant, rm/pairs_rollout) and its RM's accuracy on them (rm/train_pair_accuracy).
"""

from __future__ import annotations

from coreward.rm.evaluate import rollout_pair_accuracy, rollout_score_diagnostics


def log_rollout_diagnostics(batch, correct: list[bool], scores: list[float]) -> None:
    """Log rm/rollout_pair_accuracy, rm/accepted_score, rm/rejected_score, rm/dominant_wrong_score and
    rm/dominant_wrong_share of a training batch (`correct`: the rule's verdict per row, `scores`: the RM's).

    The answers are the rule verifier's extracted ones (`batch.verdicts()`, computed once per batch and shared);
    without a verifier in the batch the dominant wrong answer is not measured."""
    G = batch.num_generations
    batch.log("rm/rollout_pair_accuracy", rollout_pair_accuracy(correct, scores, G))  # None (no mixed group): not logged
    verdicts = batch.verdicts() if "verifier" in batch.context else None
    answers = [v.extracted for v in verdicts] if verdicts else [None] * len(correct)
    for name, value in rollout_score_diagnostics(correct, answers, scores, G).items():
        batch.log(name, value)
