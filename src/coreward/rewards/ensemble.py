"""An ensemble of reward models' combine rules: K members' scores of a completion made into one reward.

    s_k(i) = member k's score of completion i (σ of its logit, in [0, 1])
    mean:         s̄(i) = (1/K) Σ_k s_k(i)
    min:          min_k s_k(i)                                   worst-case optimization (WCO)
    uncertainty:  s̄(i) − λ·std_k s_k(i)    std_k = sqrt((1/K) Σ_k (s_k(i) − s̄(i))²)
                  s̄(i) − λ·var_k s_k(i)    with spread "variance" (uncertainty-weighted optimization, UWO)

Ensembles are the usual mitigation of over-optimization (Coste, Anwar, Kirk, Krueger, "Reward Model Ensembles
Help Mitigate Overoptimization", ICLR 2024, arXiv:2310.02743): where members disagree the policy has left what
they were trained on, and a conservative combination (min, or the mean less a multiple of the spread) pays less
there. Their UWO penalises the members' *variance* (tlc4418/llm_optimization, src/reward_modeling/scoring/
ppo_reward_functions.py: `mean − coeff·torch.var`, and `np.var` in src/bon/ensemble_rm.py), on raw RM outputs
of unbounded scale. Here the members' scores are probabilities in [0, 1], where a variance is at most 0.25 and
mostly far smaller; the standard deviation is on the score's own scale (λ = 1: one standard deviation below
the mean), so it is the default, and spread "variance" is theirs. The spread divides by K (as np.var in their
best-of-n code; torch.var in their PPO code divides by K − 1).

Used by the static ensemble (`model` with a list of paths, rewards/model.py) and by Cooper's co-optimized
ensemble (`members: K`, rewards/cooper/variants.py).
"""

from __future__ import annotations

import math

import torch

from coreward.rewards.base import RolloutBatch


COMBINES = ("mean", "min", "uncertainty")
SPREADS = ("std", "variance")


def combine_scores(member_scores: list[list[float]], combine: str = "mean", uncertainty_weight: float = 1.0,
                   uncertainty_spread: str = "std") -> tuple[list[float], list[float]]:
    """Per completion, the members' combined score and their standard deviation (the disagreement, divided by K).

    `member_scores[k][i]` is member k's score of completion i. A NaN from any member (its logit was not finite)
    makes that completion's combined score NaN: the trainer skips it rather than trust the other members alone.
    """
    if combine not in COMBINES:
        raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
    if uncertainty_spread not in SPREADS:
        raise ValueError(f"uncertainty_spread must be one of {SPREADS}, got {uncertainty_spread!r}")
    scores = torch.tensor(member_scores, dtype=torch.float64)  # [K, n]
    mean = scores.mean(dim=0)
    variance = scores.var(dim=0, correction=0)  # (1/K) Σ_k (s_k − s̄)²
    std = variance.sqrt()
    if combine == "mean":
        combined = mean
    elif combine == "min":
        combined = scores.min(dim=0).values  # NaN propagates, as in the mean
    else:
        combined = mean - uncertainty_weight * (std if uncertainty_spread == "std" else variance)
    return combined.tolist(), std.tolist()


def log_members(batch: RolloutBatch, member_scores: list[list[float]], spread: list[float], prefix: str = "model") -> None:
    """Each member's mean score (<prefix>/member<k>/score_mean) and the members' mean std over the step's
    completions (<prefix>/members_std): how far apart they are on what the policy writes now."""
    for k, scores in enumerate(member_scores):
        finite = [s for s in scores if math.isfinite(s)]
        if finite:
            batch.log(f"{prefix}/member{k}/score_mean", sum(finite) / len(finite))
    finite = [s for s in spread if math.isfinite(s)]
    if finite:
        batch.log(f"{prefix}/members_std", sum(finite) / len(finite))


def describe_format(fmt: dict) -> str:
    """An RM's recorded input format (rm/model.py `input_format`) in words, for an ensemble's mismatch error."""
    drops = {"start": "dropping a long input's start", "end": "dropping a long input's end"}.get(fmt.get("drops"), "?")
    return f"template {fmt.get('template')!r}, cut {fmt.get('cut')!r} ({drops})"
