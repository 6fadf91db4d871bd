"""The plan of one training step: the sum of what the engine holds (the policy's states and copies, generation, the
policy's update, the engine's own) and what each configured reward source declares it holds (`memory_needs`,
rewards/memory.py). The plan names no method: a user's registered source is planned by its own declaration."""

from __future__ import annotations

from coreward.grpo.config import TrainConfig, default_num_generations
from coreward.grpo.plan.activations import policy_update_items
from coreward.grpo.plan.generation import generation_items, vllm_share_problem
from coreward.grpo.plan.hardware import Hardware
from coreward.grpo.plan.lengths import DEFAULT_PROMPT_TOKENS, Lengths, step_lengths
from coreward.grpo.plan.model_states import policy_copy_items, policy_state_items
from coreward.grpo.plan.result import Plan, step_phases
from coreward.grpo.plan.settings import Precision, grpo_setting, precision
from coreward.grpo.plan.sharding import Sharding, engine_items
from coreward.rewards.memory import ALL, MemoryItem, MemoryNeeds, PlannedRun, model_shape
from coreward.runtime.memory import DTYPE_BYTES, ModelShape, parameter_count


def plan_run(config: TrainConfig, hardware: Hardware, prompt_tokens: int | None = None,
             completion_tokens: tuple[int, str] | None = None) -> Plan:
    """The plan of one training step of `config` on `hardware` (grpo/plan/__init__.py says what it counts).
    `prompt_tokens`: a bound on the prompts' length known from the data (`prompt_token_bound`), with
    data.max_prompt_tokens the smaller; `completion_tokens`: (tokens, where from), the completions' length to plan
    at in place of grpo.max_completion_length (`logged_completion_tokens`)."""
    shard = Sharding(hardware.effective_engine, hardware.processes)
    policy_precision = precision(config, hardware.on_gpu)
    policy = model_shape(config.model.name_or_path, "policy", "model.name_or_path")
    lengths = step_lengths(config, policy, prompt_tokens, completion_tokens)
    sources = reward_needs(config, hardware, shard, policy, policy_precision, lengths)
    items: list[MemoryItem] = []
    notes: list[str] = []

    items += policy_state_items(config, policy, policy_precision, shard)
    reference_is = next((needs.kl_reference for needs in sources if needs.kl_reference), "")
    items += policy_copy_items(config, policy, policy_precision, shard, reference_is, notes)
    if lengths.prompt_from_default:
        notes.append(f"prompts planned at {DEFAULT_PROMPT_TOKENS} tokens: set data.max_prompt_tokens to plan (and "
                     "enforce) their length")
    items += generation_items(config, policy, policy_precision, hardware, lengths, notes)
    for needs in sources:
        items += needs.items
        notes += needs.notes
    if config.kl_from_init and config.kl_from_init_estimator == "exact":  # its log-ratio needs the policy's logits
        items.append(run_facts(config, hardware, shard, policy, policy_precision, lengths).policy_logits_pass())
    items += policy_update_items(config, policy, policy_precision, shard.engine, lengths, hardware.on_gpu)
    items += engine_items(shard, policy, parameter_count(policy, "lm"), DTYPE_BYTES[policy_precision.compute],
                          hardware.on_gpu)
    items = held_once(items)
    if hardware.on_gpu:
        items.append(allocator_margin(items))
    elif not config.host_mmap_threshold and (kept := heap_kept(items)):
        items.append(kept)
        notes.append(HEAP_RETENTION_NOTE)
    problem = vllm_share_problem(config, policy, policy_precision, hardware, lengths)
    return Plan(hardware, items, notes, lengths=lengths, levers=[lever for needs in sources for lever in needs.levers],
                problems=[problem] if problem else [],
                phases=step_phases([item for needs in sources for item in needs.items]))


def reward_needs(config: TrainConfig, hardware: Hardware, shard: Sharding, policy: ModelShape, policy_precision: Precision,
                 lengths: Lengths) -> list[MemoryNeeds]:
    """What each configured reward source declares it holds (`RewardSource.memory_needs`), in config order."""
    from coreward.rewards import source_class

    needs = []
    for i, spec in enumerate(config.rewards):
        key = f"rewards.{i}"
        run = run_facts(config, hardware, shard, policy, policy_precision, lengths, key)
        needs.append(source_class(spec.name, key=f"{key}.name").memory_needs(spec.parsed_params(key), run))
    return needs


def run_facts(config: TrainConfig, hardware: Hardware, shard: Sharding, policy: ModelShape, policy_precision: Precision,
              lengths: Lengths, key: str = "") -> PlannedRun:
    """What a reward source is told of the run (rewards/memory.py's PlannedRun)."""
    return PlannedRun(
        key=key, on_gpu=hardware.on_gpu, engine=shard.engine, processes=shard.n, policy=policy,
        policy_weights_dtype=policy_precision.weights, policy_compute_dtype=policy_precision.compute,
        lora=config.lora.enabled, kl_reference=float(grpo_setting(config, "beta", 0.0)) > 0 and not config.lora.enabled,
        rows=lengths.rows, seq_len=lengths.seq_len, completions=lengths.generation_rows,
        groups=-(-lengths.generation_rows // int(grpo_setting(config, "num_generations", None) or default_num_generations())))


# glibc's heap on a CPU (runtime/host_memory.py): a block between glibc's first mmap threshold and its cap comes,
# once a block of its size has been freed, from the heap, which keeps it when it is freed. A full fine-tune's
# resident set keeps none beyond its plan, but a LoRA policy's held about one more copy of its update's saved tensors
# (a layer's hidden states and LoRA's dropped-out inputs) beside the tensors alive at its peak (docs/results.md,
# Mem2, has the runs). Why LoRA and not a full fine-tune is not established.
GLIBC_MMAP_THRESHOLD_START, GLIBC_MMAP_THRESHOLD_MAX = 128 << 10, 32 << 20
HEAP_RETENTION_NOTE = ("on a CPU with glibc's default, freed activations stay in the process's heap (planned: 'heap "
                       "kept'); --set host_mmap_threshold=1048576 returns them to the system (its plan leaves that "
                       "item out, for slower steps: docs/results.md)")


def heap_kept(items: list[MemoryItem]) -> MemoryItem | None:
    """One more copy of the largest phase's saved tensors in glibc's band (`MemoryItem.heap_block`), held through the
    step: what the heap keeps of one pass's freed blocks beside the next pass's own. None where there are none."""
    from coreward.rewards.memory import PHASES

    def in_band(item: MemoryItem) -> bool:
        return GLIBC_MMAP_THRESHOLD_START < item.heap_block <= GLIBC_MMAP_THRESHOLD_MAX

    kept = max(sum(i.bytes for i in items if phase in i.phases and in_band(i)) for phase in PHASES)
    if not kept:
        return None
    return MemoryItem("heap kept (glibc, freed activations)", kept, ALL,
                      "a LoRA update's saved activations once more: freed, kept by glibc's heap; "
                      "host_mmap_threshold returns them")


# PyTorch's caching allocator reserves more than it hands out (blocks split and cached: fragmentation); the plan adds
# the mean of max_memory_reserved / max_memory_allocated measured on a GPU (docs/explanation/memory-model.md)
RESERVED_OVER_ALLOCATED = 0.10
NOT_TORCH_ALLOCATED = ("vLLM reservation (colocated)", "vLLM residue while asleep", "NCCL buffers",
                       "CUDA context and workspaces")  # memory outside PyTorch's caching allocator


def allocator_margin(items: list[MemoryItem]) -> MemoryItem:
    """RESERVED_OVER_ALLOCATED of the largest phase's PyTorch-allocated items, held through the step."""
    from coreward.rewards.memory import PHASES

    allocated = max(sum(i.bytes for i in items if phase in i.phases and i.name not in NOT_TORCH_ALLOCATED)
                    for phase in PHASES)
    return MemoryItem("allocator reserve over allocated", int(RESERVED_OVER_ALLOCATED * allocated), ALL,
                      f"{RESERVED_OVER_ALLOCATED:.0%} of what torch allocates (reserved / allocated, measured on a "
                      "GPU: docs/explanation/memory-model.md)")


def held_once(items: list[MemoryItem]) -> list[MemoryItem]:
    """Items of one name are one thing several ask for (the policy's no-grad pass serves every logit reward and
    the exact kl_from_init): held once, at its largest, where it was first asked for."""
    first: dict[str, int] = {}
    kept: list[MemoryItem] = []
    for item in items:
        if item.name in first:
            at = first[item.name]
            kept[at] = max(kept[at], item, key=lambda i: i.bytes)
        else:
            first[item.name] = len(kept)
            kept.append(item)
    return kept
