"""How each engine divides a model's states over its processes (the ZeRO paper's accounting), and what an engine
adds of its own: a sharded engine's gathered layers, a process's CUDA context (or, on the CPU, its baseline).

    engine   weights                  float32 masters   gradients          AdamW moments    a frozen copy
    one      dtype bytes              (the weights)     dtype bytes        2 x dtype        dtype bytes
    ddp      dtype bytes              (the weights)     2 x dtype bytes    2 x dtype        dtype bytes
    zero2    compute bytes            4 / n             compute / n        2 x 4 / n        compute bytes
    zero3    compute / n              4 / n             compute / n        2 x 4 / n        compute / n
    fsdp2    4 / n (upcast shards)    (the shards)      4 / n              2 x 4 / n        dtype / n

(bytes per parameter; n the processes; DDP keeps its bucket copies beside the gradients.)
"""

from __future__ import annotations

from coreward.rewards.memory import ALL, POLICY_UPDATE, SCORING, MemoryItem
from coreward.runtime.memory import GIB, MIB, ModelShape


CUDA_CONTEXT_BYTES = 1 * GIB  # CUDA context and cuBLAS workspaces of one process (nvidia-smi shows ~0.5-1 GiB)
# NCCL's buffers per communicator (process group) on each GPU, measured with PyTorch on 4 NVLinked A100s: 544 MB for
# a group of 2, 688 MB for more (https://github.com/NVIDIA/nccl/issues/964); each group is a communicator of its own
NCCL_GROUP_BYTES_OF_TWO, NCCL_GROUP_BYTES = 544 * MIB, 688 * MIB
# DeepSpeed ZeRO's defaults (deepspeed/runtime/zero/config.py), which the shipped configs/accelerate/zero*.yaml keep:
# stage3_max_live_parameters, the parameters ZeRO-3 may hold gathered at once, and sub_group_size, the elements its
# optimizer steps at a time (`_prepare_fp32_grad_for_sub_group` makes each sub-group's float32 gradient)
ZERO3_MAX_LIVE_PARAMETERS = 1_000_000_000
ZERO_SUB_GROUP_SIZE = 1_000_000_000
# what `import torch, transformers, trl` and coreward's modules hold in one process on the CPU before any model loads:
# the RSS of `python -c "import coreward.grpo.train, trl, torch"` (docs/explanation/memory-model.md: how it was measured)
CPU_BASELINE_BYTES = int(0.6 * GIB)
SHARDED = ("zero2", "zero3", "fsdp2")  # the engines whose optimizer states are divided over the processes


class Sharding:
    """How `engine` divides a model's states over `n` processes (the table above)."""

    def __init__(self, engine: str, n: int):
        self.engine, self.n = engine, max(1, n)

    def weights(self, count: int, dtype_bytes: int, compute_bytes: int) -> tuple[int, str]:
        if self.engine == "zero3":
            return count * compute_bytes // self.n, f"{compute_bytes}-byte partitions, 1/{self.n}"
        if self.engine == "zero2":
            return count * compute_bytes, f"{compute_bytes} bytes each (DeepSpeed casts to the compute dtype)"
        if self.engine == "fsdp2":
            return count * 4 // self.n, f"float32 shards (FSDP2 upcasts trained weights), 1/{self.n}"
        return count * dtype_bytes, f"{dtype_bytes} bytes each"

    def masters(self, count: int, dtype_bytes: int, compute_bytes: int) -> int:
        if self.engine in ("zero2", "zero3"):
            return count * 4 // self.n  # DeepSpeed's float32 master partitions
        return 0  # one process, DDP: the weights are float32 already (or none are kept); FSDP2: its shards are

    def grads(self, count: int, dtype_bytes: int, compute_bytes: int) -> int:
        if self.engine in ("zero2", "zero3"):
            return count * compute_bytes // self.n
        if self.engine == "fsdp2":
            return count * 4 // self.n
        if self.engine == "ddp":  # DDP's bucket copies beside the gradients (gradient_as_bucket_view off)
            return 2 * count * dtype_bytes
        return count * dtype_bytes

    def optimizer(self, count: int, state_bytes: int) -> int:
        divide = self.n if self.engine in SHARDED else 1
        return 2 * count * state_bytes // divide

    def frozen(self, count: int, dtype_bytes: int, compute_bytes: int) -> int:
        """A frozen copy prepared like TRL's reference: ZeRO-3 and FSDP2 shard it, ZeRO-2 (stage 0) casts it."""
        if self.engine == "zero3":
            return count * compute_bytes // self.n
        if self.engine == "zero2":
            return count * compute_bytes
        if self.engine == "fsdp2":
            return count * dtype_bytes // self.n
        return count * dtype_bytes


def nccl_groups(engine: str) -> int:
    """The NCCL communicators a training process holds: the world group (DDP's, FSDP2's); DeepSpeed clones it for its
    data-parallel group (deepspeed/utils/groups.py `_clone_world_group`), a second communicator."""
    return 2 if engine in ("zero2", "zero3") else 1


def engine_items(shard: Sharding, policy: ModelShape, count: int, compute_bytes: int, on_gpu: bool) -> list[MemoryItem]:
    """What the engine itself holds: a sharded engine's gathered layers while they run (ZeRO-3: as many as
    stage3_max_live_parameters lets it keep), NCCL's buffers, the process's fixed cost."""
    items = []
    if shard.engine in ("zero3", "fsdp2"):
        layer_bytes = count // max(1, policy.num_hidden_layers) * compute_bytes
        embedding_bytes = policy.vocab_size * policy.hidden_size * compute_bytes
        running = max(2 * layer_bytes, layer_bytes + embedding_bytes)
        if shard.engine == "zero3":
            live = min(count, ZERO3_MAX_LIVE_PARAMETERS) * compute_bytes
            items.append(MemoryItem("gathered weights (sharded engine)", max(running, live), (POLICY_UPDATE, SCORING),
                                    "ZeRO-3's live parameters: up to stage3_max_live_parameters (1e9, DeepSpeed's "
                                    "default) gathered at once"))
        else:
            items.append(MemoryItem("gathered weights (sharded engine)", running, (POLICY_UPDATE, SCORING),
                                    "a layer's (or the embedding's) full weights while it runs, and the next one "
                                    "prefetched"))
    if on_gpu and shard.n > 1:
        per_group = NCCL_GROUP_BYTES_OF_TWO if shard.n == 2 else NCCL_GROUP_BYTES
        groups = nccl_groups(shard.engine)
        items.append(MemoryItem("NCCL buffers", groups * per_group, ALL,
                                f"{groups} communicator(s) x {per_group // MIB} MiB (NVIDIA/nccl#964, 4 x A100)"))
    if on_gpu:
        items.append(MemoryItem("CUDA context and workspaces", CUDA_CONTEXT_BYTES, ALL, "per process", gpu_measured=True))
    else:
        items.append(MemoryItem("process baseline (torch, transformers, TRL imported)", CPU_BASELINE_BYTES, ALL,
                                "RSS before any model loads (docs/explanation/memory-model.md)"))
    return items
