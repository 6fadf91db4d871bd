"""The EMA teacher of Co-rewarding-II: a slowly moving copy of the policy, its schedule, and its rollouts.

Before step t (every `update_every` steps), with T the run's max steps:

    θ_T ← α(t)·θ + (1 − α(t))·θ_T
    α(t) = α_end + ½(α_start − α_end)(1 + cos(πt/T))          (authors' script: α 0.01 → 1e-5)

The teacher starts as the policy, so it trails it by roughly 1/α steps: slow enough that the policy
can't drag its own labels along, fresh enough to improve with it.

Where the teacher's weights live:
  * full policy                   a frozen copy of the unwrapped policy (eval mode), built as a new instance of its
                                  class holding clones of its tensors (`own_copy`): a deep copy would keep the
                                  policy's instance-level patches (TRL's fused-LM-head `forward` closes over the
                                  policy's original forward), and the "teacher" would sample with the policy;
  * full policy, `as_reference`   the engine's own KL reference (`policy.reference()`), EMA-updated in place, so the
                                  KL is taken against the teacher (as in the authors' code) without a
                                  third model in memory;
  * LoRA policy                   a second adapter on the same base: "teacher", or "ref" with
                                  `as_reference` (the adapter the engine's reference pass switches to). Only the
                                  adapter is averaged; the teacher is base + EMA adapter.
A 16-bit teacher is averaged in float32 copies of its tensors (see `EmaTeacher.bind`).

Sharded models. Under DeepSpeed ZeRO-3 the update gathers the full tensors of both models and writes
rank 0's result back (`policy.gathered(..., modifier_rank=0)`), as TRL's `SyncRefModelCallback` does; under
FSDP2 it updates each process's local shards in place, which is sound because the engine prepares the
reference with the policy's sharding. Both need `as_reference: true` (the teacher is TRL's prepared
reference; a deep copy of a sharded module or an adapter added after sharding is refused). Teacher
rollouts then go through the sharded module's own forward hooks, so every process must hold at least
one prompt group. Checkpoints hold the full (gathered) teacher: `save` runs on every process (gathering
is collective: ZeRO-3 `GatheredParameters`, FSDP2 `DTensor.full_tensor`) and the main process writes it;
`load` scatters it back into the shards, so a resumed sharded run continues with its teacher.
Tested on CPU with 2 gloo processes under ZeRO-3 and FSDP2 (tests/grpo/test_sharded.py, test_sharded_teacher.py).

What the teacher computes is checked by its outputs, not only its weights: tests/rewards/test_teacher_behaviour.py
(logits and rollouts from its own weights, frozen vs tracking teachers, the α schedule measured in logits),
tests/grpo/test_teacher_vllm.py (colocated vLLM), tests/grpo/test_sharded_teacher.py (ZeRO-3, FSDP2).
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from coreward.rewards.base import Policy
from coreward.runtime.errors import CorewardError


WEIGHTS_FILE = "teacher.safetensors"
STATE_FILE = "teacher_state.json"

# (name, teacher tensor, policy tensor): the tensors the EMA averages
Pairs = list[tuple[str, torch.Tensor, torch.Tensor]]


def cosine_alpha(step: int, total_steps: int, alpha_start: float, alpha_end: float) -> float:
    """α(t) = α_end + ½(α_start − α_end)(1 + cos(πt/T)); t past T stays at α_end."""
    progress = min(step / total_steps, 1.0) if total_steps > 0 else 0.0
    return alpha_end + 0.5 * (alpha_start - alpha_end) * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def ema_update(teacher: list[torch.Tensor], policy: list[torch.Tensor], alpha: float) -> None:
    """θ_T ← α·θ + (1 − α)·θ_T, in place."""
    for t, p in zip(teacher, policy, strict=True):
        t.mul_(1.0 - alpha).add_(p.to(t.dtype), alpha=alpha)


def full_pairs(teacher: torch.nn.Module, policy: torch.nn.Module) -> Pairs:
    """Every parameter of the teacher with the policy's parameter of the same name."""
    policy_params = dict(policy.named_parameters())
    names = [name for name, _ in teacher.named_parameters()]
    if sorted(names) != sorted(policy_params):
        raise CorewardError("co_rewarding_2: the teacher's parameters don't match the policy's (different architectures?)")
    return [(name, param, policy_params[name]) for name, param in teacher.named_parameters()]


def add_teacher_adapter(model: Any, name: str) -> None:
    """Give a PEFT model a frozen copy of its active adapter under `name` (kept when it exists: TRL's "ref")."""
    active = model.active_adapter
    if name not in model.peft_config:
        model.add_adapter(name, model.peft_config[active])
        with torch.no_grad():
            for _, teacher, policy in adapter_pairs(model, name):
                teacher.copy_(policy)
    for _, teacher, _ in adapter_pairs(model, name):
        teacher.requires_grad_(False)


def adapter_pairs(model: Any, name: str) -> Pairs:
    """The adapter `name`'s tensors with the active adapter's (peft names them `...lora_A.<adapter>.weight`)."""
    active = f".{model.active_adapter}."
    return [
        (param_name.replace(active, f".{name}."), model.get_parameter(param_name.replace(active, f".{name}.")), param)
        for param_name, param in model.named_parameters()
        if active in param_name
    ]


def own_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of `model` that computes with its own weights: a new instance of its class built from its
    config on the meta device, then given clones of `model`'s parameters and buffers (same device and ties; the
    dtype the class declares for each).

    Not `copy.deepcopy`: that copies instance attributes as they are, and a patched `forward` (TRL's fused LM
    head, accelerate's autocast wrapper, TRL's fp32 lm_head) is a function whose closure holds the *policy's*
    modules; functions are not copied, so the copy would run the policy's forward. A fresh instance has only
    its class's forward, and its hooks are none of the policy's."""
    if not hasattr(type(model), "_from_config"):
        raise CorewardError(f"co_rewarding_2: the teacher copies a transformers model; got {type(model).__name__}")
    with torch.device("meta"):
        fresh = type(model)._from_config(copy.deepcopy(model.config), dtype=model.dtype)
    own = dict(fresh.named_parameters(remove_duplicate=False)) | dict(fresh.named_buffers(remove_duplicate=False))
    theirs = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))
    if sorted(own) != sorted(theirs):
        raise CorewardError("co_rewarding_2: a fresh model built from the policy's config has other tensors than the policy")
    clones: dict[int, torch.Tensor] = {}  # one clone per policy tensor, so tied weights stay tied
    with torch.no_grad():
        for name, tensor in theirs.items():
            # the dtype the class gives the tensor: TRL's fp32 lm_head is an instance patch whose forward casts
            # its input; the copy has the class's forward, so it keeps the class's dtype too
            clone = clones.setdefault(id(tensor), tensor.detach().to(own[name].dtype, copy=True))
            owner, _, leaf = name.rpartition(".")
            module = fresh.get_submodule(owner)
            if leaf in module._parameters:
                if not isinstance(clone, torch.nn.Parameter):
                    clone = clones[id(tensor)] = torch.nn.Parameter(clone, requires_grad=False)
                module._parameters[leaf] = clone
            else:
                module._buffers[leaf] = clone
    fresh.generation_config = copy.deepcopy(model.generation_config)
    return fresh.eval().requires_grad_(False)


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
        self.sharded = self.zero3 = False
        self.last_update_step: int | None = None
        self.last_alpha: float | None = None
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
        if self.sharded and any(low):
            warnings.warn("co_rewarding_2: 16-bit sharded teacher: EMA steps with α < 2^-8 may round away", stacklevel=2)
        self.masters = [t.detach().float() if is_low and not self.sharded else t for (_, t, _), is_low in zip(pairs, low)]

    # ------------------------------------------------------------------ the update
    def maybe_update(self, step: int, total_steps: int) -> None:
        """Apply the EMA before step `step` when `update_every` steps have passed since the last update."""
        if self.last_update_step is not None and step - self.last_update_step < self.update_every:
            return
        alpha = cosine_alpha(step, total_steps, self.alpha_start, self.alpha_end)
        with self._gathered(modifier_rank=0):
            ema_update(self.masters, [p for _, _, p in self.pairs], alpha)
            self._copy_masters_to_teacher()
        self.last_update_step, self.last_alpha = step, alpha

    @torch.no_grad()
    def _copy_masters_to_teacher(self) -> None:
        for master, (_, teacher, _) in zip(self.masters, self.pairs):
            if master is not teacher:
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
        from safetensors.torch import save_file

        if self.pairs is None:
            return
        tensors = self._full_masters()
        if self.policy is not None and self.policy.rank != 0:
            return
        save_file(tensors, str(directory / WEIGHTS_FILE))
        state = {"last_update_step": self.last_update_step, "last_alpha": self.last_alpha, "weights": True}
        (directory / STATE_FILE).write_text(json.dumps(state))

    def export(self, folder: Path) -> Path | None:
        """The teacher as a model folder: a full model (`AutoModelForCausalLM.from_pretrained`), or for a LoRA
        policy its adapter (`PeftModel.from_pretrained(base, folder)`). None when sharded or never built."""
        if self.pairs is None or self.sharded:
            return None
        if self.adapter is not None:  # peft writes a non-default adapter into a subfolder named after it
            import shutil

            staging = folder.parent / ".teacher-adapter"
            self.module.save_pretrained(str(staging), selected_adapters=[self.adapter])
            (staging / self.adapter).rename(folder)
            shutil.rmtree(staging)
        else:
            self.module.save_pretrained(str(folder))
        return folder

    def _full_masters(self) -> dict[str, torch.Tensor]:
        """name -> full CPU copy of each averaged tensor (ZeRO-3: gathered; FSDP2 DTensor: `full_tensor`)."""
        full = {}
        with self._gathered():
            for (name, _, _), master in zip(self.pairs, self.masters):
                value = master.detach()
                if hasattr(value, "full_tensor"):  # an FSDP2 shard (DTensor): all-gather
                    value = value.full_tensor()
                full[name] = value.cpu().clone().contiguous()
        return full

    def load(self, directory: Path) -> None:
        """Read what `save` wrote; it's applied when the teacher exists (on the first step after resume)."""
        from safetensors.torch import load_file

        state = json.loads((directory / STATE_FILE).read_text())
        weights = load_file(str(directory / WEIGHTS_FILE)) if state["weights"] else None
        self._pending = (weights, state)
        if self.pairs is not None:
            self._restore_pending()

    def _restore_pending(self) -> None:
        if self._pending is None:
            return
        weights, state = self._pending
        self._pending = None
        self.last_update_step, self.last_alpha = state["last_update_step"], state["last_alpha"]
        with self._gathered(modifier_rank=0), torch.no_grad():
            if weights is None:
                warnings.warn("co_rewarding_2: no saved teacher weights (sharded run): the teacher restarts from the policy")
                weights = {name: policy for name, _, policy in self.pairs}
            if sorted(weights) != sorted(name for name, _, _ in self.pairs):
                raise CorewardError("co_rewarding_2: the checkpoint's teacher tensors don't match this run's teacher")
            for (name, _, _), master in zip(self.pairs, self.masters):
                value = weights[name].to(master.device, master.dtype)
                if hasattr(master, "device_mesh"):  # an FSDP2 shard (DTensor): keep this process's part
                    from torch.distributed.tensor import distribute_tensor

                    value = distribute_tensor(value, master.device_mesh, master.placements)
                master.copy_(value)
            self._copy_masters_to_teacher()
