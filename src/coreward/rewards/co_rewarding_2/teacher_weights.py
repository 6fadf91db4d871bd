"""Where an EMA teacher's weights come from and how they are stored (the plumbing of `ema_teacher.py`).

Where the teacher's weights live:
  * full policy                   a frozen copy of the unwrapped policy (eval mode), built as a new instance of its
                                  class holding clones of its tensors (`runtime/model_copy.py`): a deep copy would keep the
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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from coreward.runtime.errors import CorewardError


WEIGHTS_FILE = "teacher.safetensors"
STATE_FILE = "teacher_state.json"

# (name, teacher tensor, policy tensor): the tensors the EMA averages
Pairs = list[tuple[str, torch.Tensor, torch.Tensor]]


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


# ------------------------------------------------------------------ checkpoints and export
def full_copies(pairs: Pairs, masters: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """name -> full CPU copy of each averaged tensor (FSDP2 DTensor: `full_tensor`; ZeRO-3 partitions must be
    gathered by the caller). Collective for sharded tensors: every process calls it."""
    full = {}
    for (name, _, _), master in zip(pairs, masters):
        value = master.detach()
        if hasattr(value, "full_tensor"):  # an FSDP2 shard (DTensor): all-gather
            value = value.full_tensor()
        full[name] = value.cpu().clone().contiguous()
    return full


def write_checkpoint(directory: Path, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
    """The teacher's full tensors and its update counter, into a checkpoint directory."""
    from safetensors.torch import save_file

    save_file(tensors, str(directory / WEIGHTS_FILE))
    (directory / STATE_FILE).write_text(json.dumps({**state, "weights": True}))


def read_checkpoint(directory: Path) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:
    """(tensors or None, state) as `write_checkpoint` wrote them."""
    from safetensors.torch import load_file

    state = json.loads((directory / STATE_FILE).read_text())
    return (load_file(str(directory / WEIGHTS_FILE)) if state["weights"] else None), state


@torch.no_grad()
def load_into(pairs: Pairs, masters: list[torch.Tensor], weights: dict[str, torch.Tensor]) -> None:
    """Copy full saved tensors into the averaged ones (an FSDP2 shard keeps this process's part)."""
    if sorted(weights) != sorted(name for name, _, _ in pairs):
        raise CorewardError("co_rewarding_2: the checkpoint's teacher tensors don't match this run's teacher")
    for (name, _, _), master in zip(pairs, masters):
        value = weights[name].to(master.device, master.dtype)
        if hasattr(master, "device_mesh"):  # an FSDP2 shard (DTensor): keep this process's part
            from torch.distributed.tensor import distribute_tensor

            value = distribute_tensor(value, master.device_mesh, master.placements)
        master.copy_(value)


def export_model(module: Any, adapter: str | None, folder: Path) -> Path:
    """The teacher as a model folder: a full model (`AutoModelForCausalLM.from_pretrained`), or for a LoRA
    policy its adapter (`PeftModel.from_pretrained(base, folder)`)."""
    if adapter is not None:  # peft writes a non-default adapter into a subfolder named after it
        import shutil

        staging = folder.parent / ".teacher-adapter"
        module.save_pretrained(str(staging), selected_adapters=[adapter])
        (staging / adapter).rename(folder)
        shutil.rmtree(staging)
    else:
        module.save_pretrained(str(folder))
    return folder


def check_teacher_setup(policy: Any, as_reference: bool, sharded: bool) -> None:
    """Refuse the teacher placements that can't work with this policy and engine (one line each, naming the keys)."""
    if as_reference and policy.kl_beta == 0.0:
        raise CorewardError(
            "co_rewarding_2: as_reference: true makes the teacher the KL reference, but grpo.beta is 0, so there "
            "is no reference: set grpo.beta > 0 (the paper: 0.001) or as_reference: false"
        )
    if as_reference and policy.syncs_reference:
        raise CorewardError("co_rewarding_2: as_reference: true and grpo.sync_ref_model both move the reference: drop one")
    if sharded and (not as_reference or policy.is_peft):
        raise CorewardError(
            "co_rewarding_2: with DeepSpeed ZeRO-3 or FSDP the teacher must be TRL's sharded reference model: "
            "set as_reference: true and grpo.beta > 0 (LoRA policies are not supported there)"
        )


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


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's shard of an FSDP2 DTensor, else the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def policy_fp32(policy: torch.Tensor) -> torch.Tensor:
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


def master_of(teacher: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
    """The float32 average of a 16-bit teacher tensor: a teacher that is still the policy's rounded copy (bound at
    the start, the usual case) starts from the policy's own float32 weights, not from their rounding; else from
    itself."""
    source = policy_fp32(policy)
    if source.dtype != teacher.dtype and torch.equal(source.detach().to(teacher.dtype), teacher):
        return source.detach().float().clone()
    return teacher.detach().float()


# ------------------------------------------------------------------ ZeRO-3: float32 averages of each process's partitions
# A ZeRO-3 parameter of n elements is flattened, padded to a multiple of the N processes, and process r holds the
# r-th of N equal slices (`ds_tensor`); the policy's and the reference's parameters of one shape are split alike.
def local_fp32(policy_param: torch.Tensor) -> torch.Tensor:
    """This process's slice of a ZeRO-3 policy parameter in float32: DeepSpeed's float32 master partition (the
    weights its optimizer updates), else the 16-bit partition."""
    from deepspeed.utils import safe_get_local_fp32_param

    local = safe_get_local_fp32_param(policy_param)
    return (local if local is not None else policy_param.ds_tensor).reshape(-1).float()


def zero3_partitions_match(pairs: Pairs) -> bool:
    try:
        return all(hasattr(t, "ds_tensor") and local_fp32(p).numel() == t.ds_tensor.numel() for _, t, p in pairs)
    except (ImportError, AttributeError, RuntimeError):
        return False


def gather_partitions(pairs: Pairs, masters: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """name -> the whole float32 tensor from every process's slice (collective: every process calls it)."""
    import torch.distributed as dist

    whole = {}
    for (name, teacher, _), master in zip(pairs, masters):
        slices = [torch.empty_like(master) for _ in range(dist.get_world_size())]
        dist.all_gather(slices, master.contiguous())
        whole[name] = torch.cat(slices)[: teacher.ds_numel].view(teacher.ds_shape).cpu().clone()
    return whole


@torch.no_grad()
def scatter_partitions(pairs: Pairs, masters: list[torch.Tensor], weights: dict[str, torch.Tensor]) -> None:
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


# ------------------------------------------------------------------ float32 averages ("masters") of 16-bit teachers
def make_masters(pairs: Pairs, zero3: bool, sharded: bool) -> tuple[list[torch.Tensor], bool]:
    """What the EMA runs on, and whether it runs on each process's ZeRO-3 partitions: float32 copies of 16-bit teacher
    tensors (`master_of`), else the teacher tensors themselves. Sharded tensors are averaged in place (a full float32
    copy on every process would undo the sharding), with a warning."""
    import warnings

    low = [t.dtype in (torch.float16, torch.bfloat16) for _, t, _ in pairs]
    # ZeRO-3 (DeepSpeed casts the reference to bf16): each process averages its own partition in float32, from
    # the policy's float32 master partition, and writes the rounding into the teacher's partition; no gather
    if zero3 and any(low) and zero3_partitions_match(pairs):
        return [local_fp32(p).detach().clone() for _, _, p in pairs], True
    if sharded and any(low):
        warnings.warn("co_rewarding_2: 16-bit sharded teacher: EMA steps with α < 2^-8 may round away", stacklevel=3)
    return [master_of(t, p) if is_low and not sharded else t for (_, t, p), is_low in zip(pairs, low)], False


@torch.no_grad()
def copy_masters_to_teacher(pairs: Pairs, masters: list[torch.Tensor], partitioned: bool) -> None:
    """The teacher's tensors (or ZeRO-3 partitions) take the averages' values, rounded to their dtype."""
    for master, (_, teacher, _) in zip(masters, pairs):
        if partitioned:
            teacher.ds_tensor.copy_(master.view_as(teacher.ds_tensor))
        elif master is not teacher:
            teacher.copy_(master)


@torch.no_grad()
def restore_partitions(pairs: Pairs, masters: list[torch.Tensor], weights: dict[str, torch.Tensor] | None) -> list[torch.Tensor]:
    """ZeRO-3: this process's slices of saved whole tensors into the averages; with none saved, the averages restart
    from the policy's partitions (warned)."""
    import warnings

    if weights is None:
        warnings.warn("co_rewarding_2: no saved teacher weights: the teacher restarts from the policy", stacklevel=3)
        return [local_fp32(p).detach().clone() for _, _, p in pairs]
    scatter_partitions(pairs, masters, weights)
    return masters


@torch.no_grad()
def restore_whole(pairs: Pairs, masters: list[torch.Tensor], weights: dict[str, torch.Tensor] | None) -> None:
    """Saved whole tensors into the averages (inside the caller's gather); with none saved (a sharded run), the
    teacher restarts from the policy (warned)."""
    import warnings

    if weights is None:
        warnings.warn("co_rewarding_2: no saved teacher weights (sharded run): the teacher restarts from the policy",
                      stacklevel=3)
        weights = {name: policy for name, _, policy in pairs}
    load_into(pairs, masters, weights)
