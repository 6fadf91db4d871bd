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
import warnings
from contextlib import nullcontext
from pathlib import Path

import torch

from coreward.rewards.base import Policy
from coreward.rewards.teacher_weights import (
    Pairs,
    adapter_pairs,
    add_teacher_adapter,
    export_model,
    full_copies,
    full_pairs,
    load_into,
    own_copy,
    read_checkpoint,
    write_checkpoint,
)
from coreward.runtime.errors import CorewardError


def cosine_alpha(step: int, total_steps: int, alpha_start: float, alpha_end: float) -> float:
    """α(t) = α_end + ½(α_start − α_end)(1 + cos(πt/T)); t past T stays at α_end."""
    progress = min(step / total_steps, 1.0) if total_steps > 0 else 0.0
    return alpha_end + 0.5 * (alpha_start - alpha_end) * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def ema_update(teacher: list[torch.Tensor], policy: list[torch.Tensor], alpha: float) -> None:
    """θ_T ← α·θ + (1 − α)·θ_T, in place."""
    for t, p in zip(teacher, policy, strict=True):
        t.mul_(1.0 - alpha).add_(p.to(t.dtype), alpha=alpha)


@torch.no_grad()
def distance_sums(teacher: list[torch.Tensor], policy: list[torch.Tensor], split: bool = False) -> tuple[float, float]:
    """(‖θ − θ_T‖², ‖θ‖²) over paired tensors, in float64. `split`: the tensors are this process's shards of models
    split across processes (FSDP2, ZeRO-3 partitions), whose sums are added up over the processes (collective)."""
    sums = torch.zeros(2, dtype=torch.float64, device=policy[0].device if policy else "cpu")
    for t, p in zip(teacher, policy, strict=True):
        p = p.double()
        sums[0] += (p - t.double()).pow(2).sum()
        sums[1] += p.pow(2).sum()
    if split:
        import torch.distributed as dist

        dist.all_reduce(sums)
    return float(sums[0]), float(sums[1])


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's shard of an FSDP2 DTensor, else the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


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
        self._check(policy)
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

    def _check(self, policy: Policy) -> None:
        if self.as_reference and policy.kl_beta == 0.0:
            raise CorewardError(
                "co_rewarding_2: as_reference: true makes the teacher the KL reference, but grpo.beta is 0, so there "
                "is no reference: set grpo.beta > 0 (the paper: 0.001) or as_reference: false"
            )
        if self.as_reference and policy.syncs_reference:
            raise CorewardError("co_rewarding_2: as_reference: true and grpo.sync_ref_model both move the reference: drop one")
        if self.sharded and (not self.as_reference or policy.is_peft):
            raise CorewardError(
                "co_rewarding_2: with DeepSpeed ZeRO-3 or FSDP the teacher must be TRL's sharded reference model: "
                "set as_reference: true and grpo.beta > 0 (LoRA policies are not supported there)"
            )

    def bind(self, module: torch.nn.Module, pairs: Pairs, adapter: str | None = None) -> None:
        """Use `module` to generate and `pairs` to average (what `attach` found; tests bind directly).

        The average is kept in float32 ("masters") for 16-bit teachers, whose weights are only rounded
        copies of it: in bfloat16 (8 significant bits) a step of α·(θ − θ_T) with α = 1e-4 rounds away, and
        the teacher would never move. Sharded tensors are averaged in place (a full float32 copy on every
        process would undo the sharding), with a warning.
        """
        self.module, self.pairs, self.adapter = module, pairs, adapter
        low = [t.dtype in (torch.float16, torch.bfloat16) for _, t, _ in pairs]
        # ZeRO-3 (DeepSpeed casts the reference to bf16): each process averages its own partition in float32, from
        # the policy's float32 master partition, and writes the rounding into the teacher's partition; no gather
        self.partitioned = self.zero3 and any(low) and _zero3_partitions_match(pairs)
        if self.partitioned:
            self.masters = [_local_fp32(p).detach().clone() for _, _, p in pairs]
            return
        if self.sharded and any(low):
            warnings.warn("co_rewarding_2: 16-bit sharded teacher: EMA steps with α < 2^-8 may round away", stacklevel=2)
        self.masters = [_master(t, p) if is_low and not self.sharded else t for (_, t, p), is_low in zip(pairs, low)]

    # ------------------------------------------------------------------ the update
    def maybe_update(self, step: int, total_steps: int) -> None:
        """Apply the EMA before step `step` when `update_every` steps have passed since the last update."""
        if self.last_update_step is not None and step - self.last_update_step < self.update_every:
            return
        alpha = cosine_alpha(step, total_steps, self.alpha_start, self.alpha_end)
        if self.partitioned:  # element-wise, so each process's partitions are averaged on their own
            ema_update(self.masters, [_local_fp32(p) for _, _, p in self.pairs], alpha)
            self._copy_masters_to_teacher()
            sums = distance_sums([t.ds_tensor for _, t, _ in self.pairs], [p.ds_tensor for _, _, p in self.pairs],
                                 split=True)
        else:
            with self._gathered(modifier_rank=0):
                ema_update(self.masters, [_policy_fp32(p) for _, _, p in self.pairs], alpha)
                self._copy_masters_to_teacher()
                sums = distance_sums([_local(t) for _, t, _ in self.pairs], [_local(p) for _, _, p in self.pairs],
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

    @torch.no_grad()
    def _copy_masters_to_teacher(self) -> None:
        for master, (_, teacher, _) in zip(self.masters, self.pairs):
            if self.partitioned:
                teacher.ds_tensor.copy_(master.view_as(teacher.ds_tensor))
            elif master is not teacher:
                teacher.copy_(master)

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
            tensors = _gather_partitions(self.pairs, self.masters)
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
            if weights is None:
                warnings.warn("co_rewarding_2: no saved teacher weights: the teacher restarts from the policy")
                self.masters = [_local_fp32(p).detach().clone() for _, _, p in self.pairs]
            else:
                _scatter_partitions(self.pairs, self.masters, weights)
            with torch.no_grad():
                self._copy_masters_to_teacher()
            return
        with self._gathered(modifier_rank=0), torch.no_grad():
            if weights is None:
                warnings.warn("co_rewarding_2: no saved teacher weights (sharded run): the teacher restarts from the policy")
                weights = {name: policy for name, _, policy in self.pairs}
            load_into(self.pairs, self.masters, weights)
            self._copy_masters_to_teacher()


def _policy_fp32(policy: torch.Tensor) -> torch.Tensor:
    """The policy's weights as its optimizer holds them: under DeepSpeed ZeRO-1/2 with a bf16 module, the float32
    master (collective: every process calls this for the same tensors in the same order), else the tensor itself.
    Averaged toward the bf16 module instead, the teacher would see the policy move only when its rounding does."""
    # the attribute, not its value: a process whose partition holds none of this tensor has `_hp_mapping = None`
    # and still takes part in the all-reduce that assembles it
    if hasattr(policy, "_hp_mapping") and not hasattr(policy, "ds_id"):
        from deepspeed.utils import safe_get_full_fp32_param

        full = safe_get_full_fp32_param(policy)
        if full is not None:
            return full
    return policy


def _master(teacher: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
    """The float32 average of a 16-bit teacher tensor: a teacher that is still the policy's rounded copy (bound at
    the start, the usual case) starts from the policy's own float32 weights, not from their rounding; else from
    itself."""
    source = _policy_fp32(policy)
    if source.dtype != teacher.dtype and torch.equal(source.detach().to(teacher.dtype), teacher):
        return source.detach().float().clone()
    return teacher.detach().float()


# ------------------------------------------------------------------ ZeRO-3: float32 averages of each process's partitions
# A ZeRO-3 parameter of n elements is flattened, padded to a multiple of the N processes, and process r holds the
# r-th of N equal slices (`ds_tensor`); the policy's and the reference's parameters of one shape are split alike.
def _local_fp32(policy_param: torch.Tensor) -> torch.Tensor:
    """This process's slice of a ZeRO-3 policy parameter in float32: DeepSpeed's float32 master partition (the
    weights its optimizer updates), else the 16-bit partition."""
    from deepspeed.utils import safe_get_local_fp32_param

    local = safe_get_local_fp32_param(policy_param)
    return (local if local is not None else policy_param.ds_tensor).reshape(-1).float()


def _zero3_partitions_match(pairs: Pairs) -> bool:
    try:
        return all(hasattr(t, "ds_tensor") and _local_fp32(p).numel() == t.ds_tensor.numel() for _, t, p in pairs)
    except (ImportError, AttributeError, RuntimeError):
        return False


def _gather_partitions(pairs: Pairs, masters: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """name -> the whole float32 tensor from every process's slice (collective: every process calls it)."""
    import torch.distributed as dist

    whole = {}
    for (name, teacher, _), master in zip(pairs, masters):
        slices = [torch.empty_like(master) for _ in range(dist.get_world_size())]
        dist.all_gather(slices, master.contiguous())
        whole[name] = torch.cat(slices)[: teacher.ds_numel].view(teacher.ds_shape).cpu().clone()
    return whole


@torch.no_grad()
def _scatter_partitions(pairs: Pairs, masters: list[torch.Tensor], weights: dict[str, torch.Tensor]) -> None:
    """This process's slices of saved whole tensors, into the float32 averages."""
    import torch.distributed as dist

    if sorted(weights) != sorted(name for name, _, _ in pairs):
        raise CorewardError("co_rewarding_2: the checkpoint's teacher tensors don't match this run's teacher")
    rank = dist.get_rank()
    for (name, _, _), master in zip(pairs, masters):
        flat = weights[name].reshape(-1).float()
        size = master.numel()
        flat = torch.nn.functional.pad(flat, (0, size * dist.get_world_size() - flat.numel()))
        master.copy_(flat[rank * size: (rank + 1) * size].to(master.device))
