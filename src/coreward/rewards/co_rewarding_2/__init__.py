"""Co-rewarding-II, in one place: the reward and its formula (reward.py), the EMA teacher it labels with
(ema_teacher.py), and where the teacher's weights live and how they are stored (teacher_weights.py)."""

from coreward.rewards.co_rewarding_2.reward import CoRewarding2Reward


__all__ = ["CoRewarding2Reward"]
