"""The EMA teacher of Co-rewarding-II: a slowly moving copy of the policy, its schedule, and its rollouts.

Before step t (every `update_every` steps), with T the run's max steps:

    θ_T ← α(t)·θ + (1 − α(t))·θ_T
    α(t) = α_end + ½(α_start − α_end)(1 + cos(πt/T))          (authors' script: α 0.01 → 1e-5)

The teacher starts as the policy, so it trails it by roughly 1/α steps: slow enough that the policy
can't drag its own labels along, fresh enough to improve with it.

Where the teacher's weights live (a copy, the KL reference, or a second LoRA adapter), how sharded models are
averaged and how the teacher is checkpointed: `teacher_weights.py`.

What the teacher computes is checked by its outputs, not only its weights: tests/rewards/test_teacher_behaviour.py
(logits and rollouts from its own weights, frozen vs tracking teachers, the α schedule measured in logits),
tests/grpo/test_teacher_vllm.py (colocated vLLM), tests/grpo/test_sharded_teacher.py (ZeRO-3, FSDP2).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import torch

from coreward.rewards.base import Policy
from coreward.rewards.co_rewarding_2.teacher_weights import (
    Pairs,
    adapter_pairs,
    add_teacher_adapter,
    check_teacher_setup,
    copy_masters_to_teacher,
    distance_sums,
    export_model,
    full_copies,
    full_pairs,
    gather_partitions,
    local,
    local_fp32,
    make_masters,
    policy_fp32,
    read_checkpoint,
    restore_partitions,
    restore_whole,
    write_checkpoint,
)
from coreward.runtime.errors import CorewardError
from coreward.runtime.model_copy import own_copy


def cosine_alpha(step: int, total_steps: int, alpha_start: float, alpha_end: float) -> float:
    """α(t) = α_end + ½(α_start − α_end)(1 + cos(πt/T)); t past T stays at α_end."""
    progress = min(step / total_steps, 1.0) if total_steps > 0 else 0.0
    return alpha_end + 0.5 * (alpha_start - alpha_end) * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def ema_update(teacher: list[torch.Tensor], policy: list[torch.Tensor], alpha: float) -> None:
    """θ_T ← α·θ + (1 − α)·θ_T, in place."""
    for t, p in zip(teacher, policy, strict=True):
        t.mul_(1.0 - alpha).add_(p.to(t.dtype), alpha=alpha)


class EmaTeacher:
    """Holds the teacher, updates it on schedule, samples from it, and saves / restores it."""

    def __init__(self, alpha_start: float = 0.01, alpha_end: float = 1e-5, update_every: int = 1,
                 as_reference: bool = False, temperature: float = 1.0):
        if not (0.0 <= alpha_end <= 1.0 and 0.0 <= alpha_start <= 1.0):
            raise ValueError(f"alpha_start and alpha_end must lie in [0, 1], got {alpha_start}, {alpha_end}")
        if update_every < 1:
            raise ValueError(f"update_every must be >= 1, got {update_every}")
        self.alpha_start, self.alpha_end = alpha_start, alpha_end
        self.update_every = update_every
        self.as_reference = as_reference
        self.temperature = temperature
        self.policy: Policy | None = None  # set by `attach`
        self.module: torch.nn.Module | None = None  # what generates: the copy, the reference, or the PEFT policy
        self.adapter: str | None = None  # the teacher adapter's name (LoRA policies)
        self.pairs: Pairs | None = None
        self.masters: list[torch.Tensor] = []  # what the EMA runs on: float32 copies of 16-bit teacher tensors, else those
        self.sharded = self.zero3 = self.partitioned = False
        self.last_update_step: int | None = None
        self.last_alpha: float | None = None
        self.last_distance: float | None = None  # ‖θ − θ_T‖₂ after the last update (co_rewarding_2/teacher_distance)
        self._policy_sq: float | None = None  # ‖θ‖² at the last update: did the policy move since?
        self._pending: tuple[dict[str, torch.Tensor] | None, dict] | None = None  # restored before the first bind

    # ------------------------------------------------------------------ building
    def attach(self, policy: Policy) -> None:
        """Find or make the teacher next to the policy (once), then restore any loaded state."""
        if self.pairs is not None:
            return
        self.policy = policy
        self.zero3, self.sharded = policy.is_zero3, policy.is_sharded
        check_teacher_setup(policy, self.as_reference, self.sharded)
        model = policy.module()
        if policy.is_peft:
            name = "ref" if self.as_reference else "teacher"
            add_teacher_adapter(model, name)
            self.bind(model, adapter_pairs(model, name), adapter=name)
        else:
            if self.as_reference:
                teacher = policy.reference()
            else:
                teacher = own_copy(model)
            self.bind(teacher, full_pairs(teacher, model))
        self._restore_pending()

    def bind(self, module: torch.nn.Module, pairs: Pairs, adapter: str | None = None) -> None:
        """Use `module` to generate and `pairs` to average (what `attach` found; tests bind directly).

        The average is kept in float32 ("masters") for 16-bit teachers, whose weights are only rounded
        copies of it: in bfloat16 (8 significant bits) a step of α·(θ − θ_T) with α = 1e-4 rounds away, and
        the teacher would never move. Sharded tensors are averaged in place (a full float32 copy on every
        process would undo the sharding), with a warning.
        """
        self.module, self.pairs, self.adapter = module, pairs, adapter
        self.masters, self.partitioned = make_masters(pairs, self.zero3, self.sharded)

    # ------------------------------------------------------------------ the update
    def maybe_update(self, step: int, total_steps: int) -> None:
        """Apply the EMA before step `step` when `update_every` steps have passed since the last update."""
        if self.last_update_step is not None and step - self.last_update_step < self.update_every:
            return
        alpha = cosine_alpha(step, total_steps, self.alpha_start, self.alpha_end)
        if self.partitioned:  # element-wise, so each process's partitions are averaged on their own
            ema_update(self.masters, [local_fp32(p) for _, _, p in self.pairs], alpha)
            self._copy_masters_to_teacher()
            sums = distance_sums([t.ds_tensor for _, t, _ in self.pairs], [p.ds_tensor for _, _, p in self.pairs],
                                 split=True)
        else:
            with self._gathered(modifier_rank=0):
                ema_update(self.masters, [policy_fp32(p) for _, _, p in self.pairs], alpha)
                self._copy_masters_to_teacher()
                sums = distance_sums([local(t) for _, t, _ in self.pairs], [local(p) for _, _, p in self.pairs],
                                     split=any(hasattr(p, "to_local") for _, _, p in self.pairs))
        self._check_distance(step, alpha, *sums)
        self.last_update_step, self.last_alpha = step, alpha

    def _check_distance(self, step: int, alpha: float, distance_sq: float, policy_sq: float) -> None:
        """Record ‖θ − θ_T‖ after this update, and stop the run when the teacher is the policy.

        The distance is taken between the tensors the two models compute with (the teacher's, as it samples; the
        policy's module weights). After an update, θ − θ_T = (1 − α)(θ − θ_T,before): with α < 1 it is 0 only when
        the policy sits exactly where the teacher was, which a policy that has moved since the last update (its
        ‖θ‖² changed) does not do. Zero then means the teacher *is* the policy: its tensors are the policy's (or are
        overwritten with them), its rollouts are the policy's own, and Co-rewarding-II has silently become majority
        voting. The same numbers on every process (replicated weights, or sums over all shards), so all stop."""
        moved = self._policy_sq is not None and policy_sq != self._policy_sq
        self.last_distance, self._policy_sq = distance_sq ** 0.5, policy_sq
        if distance_sq == 0.0 and alpha < 1.0 and moved:
            raise CorewardError(
                f"co_rewarding_2: before step {step} the EMA teacher's weights equal the policy's (‖θ − θ_T‖ = 0 after "
                f"an update with α = {alpha:.3g} < 1), although the policy has moved since the last update: the "
                "teacher is not a model of its own (its tensors are the policy's, or the policy's weights are copied "
                "into it), so it samples with the policy's weights and the reward is the policy's agreement with "
                "itself (majority voting). Stopping: this is a bug in how the teacher was built or restored")

    def _copy_masters_to_teacher(self) -> None:
        copy_masters_to_teacher(self.pairs, self.masters, self.partitioned)

    def _gathered(self, modifier_rank: int | None = None):
        """Full tensors of ZeRO-3 partitioned parameters for the duration of the block; nothing otherwise."""
        if self.policy is None:  # bound by hand (tests): plain tensors
            return nullcontext()
        tensors = [t for _, t, _ in self.pairs] + [p for _, _, p in self.pairs]
        return self.policy.gathered(tensors, modifier_rank=modifier_rank)

    # ------------------------------------------------------------------ rollouts
    def generate(self, policy: Policy, prompt_ids: list[list[int]], num_generations: int) -> list[list[str]]:
        """`num_generations` sampled completions (text) for each prompt, at the teacher's temperature."""
        self.attach(policy)
        return policy.generate(self.module, prompt_ids, num_generations, self.temperature, adapter=self.adapter)

    # ------------------------------------------------------------------ checkpoints
    def save(self, directory: Path) -> None:
        """Write the averaged tensors, full, and the update counter. Called on every process (a sharded
        teacher is gathered collectively); the main process writes."""
        if self.pairs is None:
            return
        if self.partitioned:
            tensors = gather_partitions(self.pairs, self.masters)
        else:
            with self._gathered():
                tensors = full_copies(self.pairs, self.masters)
        if self.policy is not None and self.policy.rank != 0:
            return
        state = {"last_update_step": self.last_update_step, "last_alpha": self.last_alpha}
        write_checkpoint(directory, tensors, state)

    def export(self, folder: Path) -> Path | None:
        """The teacher as a loadable model folder (`teacher_weights.export_model`); None when sharded or never
        built."""
        if self.pairs is None or self.sharded:
            return None
        return export_model(self.module, self.adapter, folder)

    def load(self, directory: Path) -> None:
        """Read what `save` wrote; it's applied when the teacher exists (on the first step after resume)."""
        self._pending = read_checkpoint(directory)
        if self.pairs is not None:
            self._restore_pending()

    def _restore_pending(self) -> None:
        if self._pending is None:
            return
        weights, state = self._pending
        self._pending = None
        self.last_update_step, self.last_alpha = state["last_update_step"], state["last_alpha"]
        if self.partitioned:  # each process takes its slices; no gather (it would re-partition the old values)
            self.masters = restore_partitions(self.pairs, self.masters, weights)
            self._copy_masters_to_teacher()
            return
        with self._gathered(modifier_rank=0):  # written inside the gather: ZeRO-3 re-partitions rank 0's values
            restore_whole(self.pairs, self.masters, weights)
            self._copy_masters_to_teacher()
