"""Reward sources. Importing this package registers every method under its config name."""

from coreward.rewards.base import RewardSource, RolloutBatch, register, registered_sources
from coreward.rewards import co_rewarding_1, co_rewarding_2, cooper, entropy, majority, model, rule, self_certainty  # noqa: F401  (registration)

__all__ = ["RewardSource", "RolloutBatch", "register", "registered_sources"]
