"""Cooper's RM sharded by the engine the policy runs under, on the same processes (`RMLearner(sharding=...)`).

    policy engine      the RM                                            per process, fp32 AdamW (R parameters, N processes)
    FSDP2              decoder layers and root `fully_shard`ed on the     ≈ 16R/N  (weights, gradients, 2 moments: all shards)
                       policy's mesh; AdamW over the DTensor shards
    DeepSpeed ZeRO-3   a second DeepSpeed engine, stage 3                 ≈ 20R/N  (DeepSpeed keeps fp32 master partitions
                                                                          besides fp32 weights: +4R/N)
    DeepSpeed ZeRO-2   a second DeepSpeed engine, stage 2                 ≈ 4R + 16R/N  (weights whole; gradients, masters
                                                                          and moments split)
    DDP, one process   replicated (unchanged: rewards/cooper/learner.py)              16R

Why a second DeepSpeed engine (as DeepSpeed-Chat builds one per actor and critic) rather than accelerate's
multiple-plugin API: TRL builds the Accelerator, so a second plugin would have to be declared before it exists;
accelerate's `prepare` ties a DeepSpeed model to the run's `train_batch_size` and gradient-accumulation count,
which are the policy's; and the RM's step is not the trainer's step (several mini-batches and epochs per RL
step). `deepspeed.initialize` with a config of the RM's own (micro-batch 1, no accumulation, the RM's clip,
the policy's ZeRO stage and offload settings) gives an engine whose step is exactly one RM optimizer step.

What every engine needs the same way:
  * lock-step forward passes. A sharded forward gathers parameters collectively, so every process runs the
    same number of forward (and backward) passes: scoring and the update pad a process's share with passes on
    a stand-in row whose result is dropped (`score_unique`) or whose loss is multiplied by 0 (`RMLearner._step`);
  * one result. The learner's loss on a process is Σ its pairs' losses / (all pairs); the engines average
    gradients over N processes, so the loss is multiplied by N first: the reduced gradient is the unsharded
    learner's all-reduced sum, and clip and AdamW then act on the same numbers;
  * checkpoints. The whole RM is gathered (collective) and the main process writes it once in HF format
    (`VerifyRM.from_pretrained` loads it); FSDP2's optimizer state is gathered and written once too, DeepSpeed's
    is its engine's own per-rank files. `load` builds the whole RM, shards it, then restores the optimizer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coreward.runtime.distributed import shard_bounds, world


ENGINES = ("fsdp2", "zero3", "zero2")
ENGINE_DIR, ENGINE_TAG = "rm_engine", "rm"  # DeepSpeed's checkpoint of the RM's engine (per-rank optimizer shards)
FULL_OPTIMIZER_FILE = "optimizer_full.pt"  # FSDP2: the gathered optimizer state, written once
RANK_OPTIMIZER_FILE = "optimizer_rank{rank}.pt"  # FSDP2 with optimizer_offload: each process's CPU masters' moments


@dataclass
class Sharding:
    """How to shard the RM: `kind` (one of ENGINES), the policy's device mesh (FSDP2) and ZeRO settings (DeepSpeed)."""

    kind: str
    mesh: Any = None
    zero: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in ENGINES:
            raise ValueError(f"RM sharding must be one of {ENGINES}, got {self.kind!r}")


def sharding_for(policy) -> Sharding | None:
    """The RM's sharding under the engine the run's policy uses; None (replicated) under DDP, one process, FSDP1."""
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType

    if not AcceleratorState._shared_state or world()[1] == 1:
        return None
    state = AcceleratorState()
    if state.distributed_type == DistributedType.DEEPSPEED:
        plugin = state.deepspeed_plugin
        stage = int(plugin.zero_stage)
        zero = dict(plugin.deepspeed_config.get("zero_optimization", {}))
        return Sharding("zero3" if stage == 3 else "zero2", zero=zero) if stage >= 1 else None
    if state.distributed_type == DistributedType.FSDP and int(state.fsdp_plugin.fsdp_version) == 2:
        mesh = None
        if policy is not None:  # the policy's mesh: its parameters are DTensors on it
            mesh = next((p.device_mesh for p in policy.module().parameters() if hasattr(p, "device_mesh")), None)
        return Sharding("fsdp2", mesh=mesh)
    return None


# --------------------------------------------------------------------------- lock-step passes


def lockstep_ranges(n: int, chunk: int) -> list[tuple[int, int]]:
    """This process's share of n items in chunks of `chunk`, padded with empty ranges (start == stop) to the
    number of chunks the largest share needs: every process makes the same number of passes."""
    rank, size = world()
    start, stop = shard_bounds(n, rank, size)
    passes = math.ceil(math.ceil(n / size) / chunk) if n else 0
    ranges = [(first, min(first + chunk, stop)) for first in range(start, stop, chunk)]
    return ranges + [(stop, stop)] * (passes - len(ranges))


def score_unique(rm, triples: list[tuple[str, str, str]]) -> list[float]:
    """`rm.evaluate.score_unique` for a sharded RM: each distinct triple scored once, split across processes,
    with every process making the same number of forward passes (padding passes score the first triple)."""
    from accelerate.utils import gather_object

    unique = list(dict.fromkeys(triples))
    local: list[float] = []
    for first, stop in lockstep_ranges(len(unique), rm.batch_size):
        part = unique[first:stop] or unique[:1]
        scores = rm.score(*map(list, zip(*part)), batch_size=len(part))
        local += scores if stop > first else []
    by_triple = dict(zip(unique, gather_object(local)))
    return [by_triple[t] for t in triples]


# --------------------------------------------------------------------------- the sharded learner's engine


class ShardedRM:
    """Shards a learner's RM in place and takes over its backward pass, optimizer step and checkpoints."""

    def __init__(self, learner, sharding: Sharding, weight_decay: float, optimizer_offload: bool):
        self.kind = sharding.kind
        self.engine = None  # DeepSpeed's engine
        self.offload = optimizer_offload
        rm = learner.rm
        rm.sharded = True  # scoring goes lock-step (rm/evaluate.py `score_unique`)
        self.architecture = type(rm.model).__name__  # FSDP2 renames the class (FSDP<name>); checkpoints keep this
        if self.kind == "fsdp2":
            self.module = _fully_shard(rm.model, sharding.mesh, rm.device)
            learner.parameters = [p for p in self.module.parameters() if p.requires_grad]
            # AdamW on float32 copies of this process's shards (the replicated learner's masters, one shard each),
            # copied back after each step: on the CPU with optimizer_offload, on the device for a bf16 RM
            local = [p.to_local() for p in learner.parameters]
            learner.masters = [t.detach().float().to("cpu" if optimizer_offload else t.device, copy=True)
                               for t in local] if learner.settings.keeps_masters(learner.low_precision) else None
            learner.optimizer = torch.optim.AdamW(learner.optimized, lr=learner.lr,
                                                  weight_decay=weight_decay)
        else:
            import deepspeed

            config = deepspeed_config(sharding, learner.max_grad_norm, next(rm.model.parameters()).dtype,
                                      optimizer_offload)
            params = [p for p in rm.model.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW(params, lr=learner.lr, weight_decay=weight_decay)
            self.engine, learner.optimizer, _, _ = deepspeed.initialize(model=rm.model, optimizer=optimizer,
                                                                       config=config, dist_init_required=False)
            self.module = self.engine.module
            rm.model = self.engine  # forward through the engine: ZeRO-3's gathers and its step bookkeeping
            learner.parameters = params
            learner.masters = None  # DeepSpeed keeps (and offloads) its own fp32 partitions

    # -- the update ------------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, last: bool) -> None:
        """Backpropagate `loss` × N (the engines average over N processes; the learner wants the sum)."""
        scaled = loss * world()[1]
        if self.engine is None:
            scaled.backward()
        else:  # one optimizer step after several passes: the engine accumulates until the boundary
            self.engine.set_gradient_accumulation_boundary(last)
            self.engine.backward(scaled)

    def clip_and_step(self, learner) -> tuple[float, bool]:
        """Clip to `max_grad_norm` and step (skipped on a non-finite norm); grads cleared. (norm, stepped)."""
        if self.engine is not None:
            skipped = self.engine.skipped_steps
            self.engine.step()  # clip (the config's gradient_clipping), overflow check, AdamW, zero_grad
            norm = self.engine.get_global_grad_norm()
            norm = float(norm) if norm is not None else float("nan")
            return norm, self.engine.skipped_steps == skipped and math.isfinite(norm)
        norm = torch.nn.utils.clip_grad_norm_(learner.parameters, learner.max_grad_norm)
        norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        stepped = math.isfinite(norm)
        if stepped:  # one tensor at a time, as the replicated learner (masters: this process's shards)
            learner._optimizer_step(local=lambda t: t.to_local() if hasattr(t, "to_local") else t)
        learner.optimizer.zero_grad(set_to_none=True)
        for p in learner.parameters:
            p.grad = None
        return norm, stepped

    # -- checkpoints -----------------------------------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole RM's weights on the main process's CPU (collective: call on every process; {} elsewhere)."""
        main = world()[0] == 0
        if self.kind == "fsdp2":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            state = get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return state if main else {}
        if self.kind == "zero2":  # whole parameters on every process
            return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()} if main else {}
        import deepspeed

        state = {}
        for name, param in self.module.named_parameters():
            with deepspeed.zero.GatheredParameters([param]):
                if main:
                    state[name] = param.detach().cpu().clone()
        if main:
            for name, buffer in self.module.named_buffers():
                state[name] = buffer.detach().cpu().clone()
        return state

    def save(self, learner, directory: Path, weights_dir: str, optimizer_file: str) -> None:
        """Whole RM (main process, HF format, atomic) and the optimizer; on every process."""
        from coreward.runtime.files import atomic_directory

        state = self.full_state_dict()
        Path(directory).mkdir(parents=True, exist_ok=True)  # every process writes here (its optimizer shard)
        if world()[0] == 0:
            with atomic_directory(directory / weights_dir) as staging:
                self.module.save_pretrained(staging, state_dict=state)
                learner.rm.tokenizer.save_pretrained(staging)
                config = Path(staging) / "config.json"
                config.write_text(config.read_text().replace(f'"FSDP{self.architecture}"', f'"{self.architecture}"'))
        if self.engine is not None:
            self.engine.save_checkpoint(str(directory / ENGINE_DIR), tag=ENGINE_TAG, save_latest=False)
        elif learner.masters is not None:  # this process's masters and their moments (plain tensors, per rank)
            torch.save({"optimizer": learner.optimizer.state_dict(),
                        "masters": [m.cpu() for m in learner.masters] if learner.low_precision else None},
                       directory / RANK_OPTIMIZER_FILE.format(rank=world()[0]))
        else:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            state = get_optimizer_state_dict(self.module, learner.optimizer,
                                             options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            if world()[0] == 0:
                torch.save(state, directory / FULL_OPTIMIZER_FILE)
        _barrier()  # the files exist before any process reports the checkpoint written

    def load(self, learner, directory: Path) -> None:
        """The optimizer state `save` wrote, into this run's shards (the weights came with the RM)."""
        if self.engine is not None:
            self.engine.load_checkpoint(str(directory / ENGINE_DIR), tag=ENGINE_TAG, load_optimizer_states=True,
                                        load_lr_scheduler_states=False)
            return
        if learner.masters is not None:
            state = torch.load(directory / RANK_OPTIMIZER_FILE.format(rank=world()[0]), map_location="cpu")
            if "optimizer" in state:
                for master, saved in zip(learner.masters, state["masters"] or []):
                    master.copy_(saved)
                state = state["optimizer"]
            learner.optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        state = torch.load(directory / FULL_OPTIMIZER_FILE, map_location="cpu", weights_only=False)
        set_optimizer_state_dict(self.module, learner.optimizer, optim_state_dict=state,
                                 options=StateDictOptions(full_state_dict=True))


def _fully_shard(model: torch.nn.Module, mesh, device) -> torch.nn.Module:
    """FSDP2: each transformer block (the model's `_no_split_modules`) its own unit, then the root."""
    from torch.distributed.fsdp import fully_shard

    if mesh is None:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(torch.device(device).type, (world()[1],))
    blocks = set(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def deepspeed_config(sharding: Sharding, max_grad_norm: float, dtype: torch.dtype, offload: bool) -> dict:
    """The RM's own DeepSpeed config: the policy's ZeRO stage and offload settings, one micro-batch per step
    (the learner sets accumulation boundaries itself), the RM's clip and dtype."""
    stage = 3 if sharding.kind == "zero3" else 2
    zero = {"stage": stage}
    for key in ("offload_param", "offload_optimizer", "stage3_param_persistence_threshold"):
        value = sharding.zero.get(key)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if v != "auto"}
        if value is not None and value != "auto":
            zero[key] = value
    if stage != 3:
        zero.pop("offload_param", None)
    if offload:  # optimizer_offload: AdamW state (and fp32 partitions) on the CPU, as in the replicated learner
        zero["offload_optimizer"] = {"device": "cpu"}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": world()[1],
        "gradient_clipping": max_grad_norm,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == torch.bfloat16},
        "fp16": {"enabled": False},
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,  # torch's AdamW on offloaded state (DeepSpeedCPUAdam needs a build)
        "steps_per_print": 10**9,
    }


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
