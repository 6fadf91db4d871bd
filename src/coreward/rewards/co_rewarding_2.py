"""Co-rewarding-II: agree with a slowly updated EMA teacher.

The teacher θ_T starts as the policy θ and follows it by an exponential moving average (see
`ema_teacher.py`): before step t, θ_T ← α(t)·θ + (1 − α(t))·θ_T, α(t) cosine from 0.01 to 1e-4.
For each prompt group g the teacher samples its own G rollouts (temperature 1.0), and

    ŷ_g = majority answer of the teacher's G rollouts     (empty answers don't vote; ties: first seen)
    r_i = 1[a_i ≡ ŷ_g]  for each policy rollout i ∈ g      (no label, or no answer → 0)

The policy can't raise its reward by collapsing onto its own current answers (the failure of plain
majority voting): the label comes from a model that moves ~1/α times slower. With `as_reference`, the
teacher is also the KL reference, as in the authors' code.

No reference answer is used. When references exist, the label accuracy and the teacher's own accuracy
are logged, so one can watch the pseudo labels against the truth.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.rewards.ema_teacher import EmaTeacher
from coreward.rewards.voting import Match, label_accuracy, majority_votes, matches_label
from coreward.training.distributed import distributed_map
from coreward.verify import extract_answer


@register("co_rewarding_2")
class CoRewarding2Reward(RewardSource):
    def __init__(
        self,
        alpha_start: float = 0.01,
        alpha_end: float = 1e-4,
        update_every: int = 1,
        as_reference: bool = False,
        temperature: float = 1.0,
        match: Match = "verified",
    ):
        if match not in ("verified", "exact"):
            raise ValueError(f"match must be 'verified' or 'exact', got {match!r}")
        self.match = match
        self.teacher = EmaTeacher(alpha_start, alpha_end, update_every, as_reference, temperature)
        self._update_time: float | None = None

    def on_step_begin(self, trainer: Any) -> None:
        """θ_T ← α·θ + (1 − α)·θ_T before this step's rollouts (train mode only)."""
        start = time.perf_counter()
        self.teacher.attach(trainer)
        self.teacher.maybe_update(trainer.state.global_step, trainer.state.max_steps)
        self._update_time = time.perf_counter() - start

    def compute(self, batch: RolloutBatch) -> list[float]:
        """Teacher rollouts for each group's prompt, split across processes, then the rewards."""
        trainer = batch.context["trainer"]
        G = batch.num_generations
        group_prompts = [batch.prompt_ids[rows.start] for rows in batch.groups()]
        start = time.perf_counter()
        teacher_completions = distributed_map(lambda share: self.teacher.generate(trainer, share, G), group_prompts)
        batch.log("time/teacher_generation", time.perf_counter() - start)
        batch.log("time/teacher_update", self._update_time)
        batch.log("co_rewarding_2/alpha", self.teacher.last_alpha)
        return self.score(batch, teacher_completions)

    def score(self, batch: RolloutBatch, teacher_completions: list[list[str]]) -> list[float]:
        """Rewards of the policy's rollouts given the teacher's rollouts of each group (one list per group)."""
        verifier = batch.context["verifier"]
        teacher_answers = [[extract_answer(c) for c in group] for group in teacher_completions]
        labels = [vote[0] for vote in majority_votes(teacher_answers, self.match, verifier)]
        answers = batch.extracted_answers()
        rewards = []
        for label, rows in zip(labels, batch.groups()):
            rewards += [1.0 if ok else 0.0 for ok in matches_label(label, [answers[i] for i in rows], self.match, verifier)]

        batch.log("co_rewarding_2/teacher_policy_agreement", sum(rewards) / len(rewards))
        batch.log("co_rewarding_2/no_label_rate", sum(label is None for label in labels) / len(labels))
        if batch.references is not None:
            group_refs = [batch.references[rows.start] for rows in batch.groups()]
            batch.log("co_rewarding_2/label_accuracy", label_accuracy(labels, group_refs, verifier))
            batch.log("co_rewarding_2/teacher_accuracy", teacher_accuracy(teacher_completions, group_refs, verifier))
        return rewards

    def save_state(self, directory: Path) -> None:
        self.teacher.save(directory)

    def load_state(self, directory: Path) -> None:
        self.teacher.load(directory)


def teacher_accuracy(teacher_completions: list[list[str]], group_refs: list[str | None], verifier: Any) -> float | None:
    """Verified accuracy of the teacher's rollouts, over the groups that have a reference."""
    pairs = [(c, ref) for group, ref in zip(teacher_completions, group_refs) if ref is not None for c in group]
    if not pairs:
        return None
    verdicts = verifier.verify_completions([c for c, _ in pairs], [ref for _, ref in pairs])
    return sum(v.correct for v in verdicts) / len(verdicts)
