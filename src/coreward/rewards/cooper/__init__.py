"""Cooper, in one place: the reward and its formula (reward.py), the RM learner it trains during RL
(learner.py), the assistant that writes its negatives (assistant.py), the RM it owns through checkpoints
(owner.py), what it declares to the memory plan (memory.py) and its variants (variants.py). The VerifyRM model
it scores with is generic and lives in coreward.rm."""

from coreward.rewards.cooper.reward import CooperReward, select_positives


__all__ = ["CooperReward", "select_positives"]
