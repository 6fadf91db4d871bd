"""What Cooper holds in memory (`CooperReward.memory_needs`, mixed in from here: reward.py stays a page).

On the training device, unless the RM has a device of its own: the RM's weights (on the CPU between uses with
`param_offload`), its AdamW state and float32 masters (on the CPU with `optimizer_offload`; on the device through the
RM update and step with `optimizer_offload_step: device`, the Cooper authors'), through every phase; its
gradients from the RM update through the RM step; one update pass's kept activations (pairs' two sides, at most
`max_tokens_per_pass` tokens, recomputed per layer with `gradient_checkpointing`) and backward's activation
gradients of one layer at a time (transient); the AdamW step's temporaries of
one tensor at a time (learner.py); a no-grad scoring pass. The variants (variants.py): `anchor` keeps θ_0
as float32; a co-optimized ensemble of `members` K holds K RMs with their own masters, moments and θ_0, each at its
own RM's shape (`member_rms`), updated and scored one after another (gradients, activations and passes are one
member's at a time: the largest member's). A local assistant or positive judge holds its weights and a generation's
cache.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from coreward.rewards.cooper.assistant import PROMPTS, REPLY_EXTRA_TOKENS
from coreward.rewards.memory import (
    ALL,
    NO_MODEL,
    RM_MAX_LENGTH,
    RM_STEP,
    RM_UPDATE,
    SCORING,
    Lever,
    MemoryItem,
    MemoryNeeds,
    PlannedRun,
    copy_cost,
    judge_request_tokens,
    local_llm_items,
    parameters_text,
    recompute_cost,
    rm_on_its_own_device,
    rm_passes,
    rm_shape,
)
from coreward.runtime.memory import (
    DTYPE_BYTES,
    ModelShape,
    activation_bytes,
    activation_gradient_bytes,
    format_bytes,
    parameter_count,
    scoring_bytes,
)


class CooperMemory:
    """`memory_needs` of the Cooper source (its RM learner, variants, assistant and positive judge)."""

    @classmethod
    def memory_needs(cls, params: Any, run: PlannedRun) -> MemoryNeeds:
        needs = MemoryNeeds()
        if not rm_on_its_own_device(params, run, needs.notes):
            learner = _rm_learner_items(params, run, needs.notes)
            needs.items += learner
            needs.levers += _rm_levers(params, run, learner)
        needs.items += local_llm_items(run, params.assistant, "assistant", "assistant",
                                       assistant_request_tokens(run, params.assistant_prompt))
        needs.items += local_llm_items(run, params.positive_judge, "positive judge", "positive_judge",
                                       judge_request_tokens(run, params.positive_judge_format))
        return needs


def _rm_learner_items(params: Any, run: PlannedRun, notes: list[str]) -> list[MemoryItem]:
    """The RM learner's items. A co-optimized ensemble (`members` K) plans each member at its own RM's shape (its
    `member_rms` entry's; by default a copy of `rm`): what every member keeps for the run is summed, what an update or
    a pass needs is the largest member's (they update and score one at a time)."""
    key = f"{run.key}.params"
    shapes = {params.rm: rm_shape(params.rm, f"{key}.rm", notes)}  # each starting RM's, read once
    for i, start in enumerate(params.member_rms or []):
        shapes.setdefault(start, rm_shape(start, f"{key}.member_rms.{i}", notes))
    if run.shards_like_the_policy:
        for setting in ("param_offload", "max_tokens_per_pass"):
            if getattr(params, setting, None):
                notes.append(f"{key}.{setting}: coreward train refuses it for an RM sharded like the policy "
                             f"({run.engine}); planned as if it applied")
    if params.optimizer_offload and params.optimizer_offload_step != "device":
        notes.append(f"{key}: the RM's AdamW state and float32 masters are on the CPU (optimizer_offload)")
    members = [_one_rm_items(params, run, shapes[start]) for start in params.member_starts()]
    return [_across_members(parts) for parts in zip(*members)]  # every member's list: the same items, in one order


HELD = (" weights", " float32 masters", " AdamW moments")  # what each member keeps for the run (anchor weights too)


def _across_members(parts: tuple[MemoryItem, ...]) -> MemoryItem:
    """One item of the K members' (one each): what each keeps, summed; what one update or pass needs, the largest."""
    if len(parts) == 1:
        return parts[0]
    if not parts[0].name.endswith(HELD):  # gradients, activations, the optimizer step, the scoring pass
        return max(parts, key=lambda it: it.bytes)
    if len({it.bytes for it in parts}) == 1:
        note = f"{parts[0].note}; x {len(parts)} members"
    else:
        note = f"member 0: {parts[0].note}; summed over {len(parts)} members of different sizes"
    return dataclasses.replace(parts[0], bytes=sum(it.bytes for it in parts), note=note)


def _one_rm_items(params: Any, run: PlannedRun, shape: ModelShape) -> list[MemoryItem]:
    """What one RM learner of `shape` holds: weights, masters, moments, gradients, update and scoring passes."""
    name = f"{run.key} Cooper RM"
    count = parameter_count(shape, "score")
    dtype = params.rm_dtype
    e = DTYPE_BYTES[dtype]
    # an RM sharded like the policy (ZeRO-3, FSDP2) holds a 1/n share of each state; ZeRO-2 a share of the moments
    divide = run.processes if run.engine in ("zero3", "fsdp2") and run.processes > 1 else 1
    offload, optimizer_offload = params.param_offload, params.optimizer_offload
    keeps_masters = params.keeps_masters(low_precision=e < 4)  # the learner's own rule (rewards/cooper/learner.py)
    items = [MemoryItem(f"{name} weights", count * e // divide, (SCORING, RM_UPDATE, RM_STEP) if offload else ALL,
                        f"{parameters_text(count)} in {dtype}" + ("; on the CPU between uses (param_offload)"
                                                                   if offload else ""), gpu_measured=True)]
    # optimizer_offload_step device (the authors'): the offloaded state comes to the device for each RM update and
    # its step (rewards/cooper/learner.py `_optimizer_held`), so it is held there through those phases
    steps_on_device = optimizer_offload and params.optimizer_offload_step == "device"
    if not optimizer_offload or steps_on_device:  # else on the CPU (said in the notes)
        held = (RM_UPDATE, RM_STEP) if steps_on_device else ALL
        where = "; on the CPU between RM updates (optimizer_offload, stepped on the device)" if steps_on_device else ""
        if keeps_masters:
            items.append(MemoryItem(f"{name} float32 masters", count * 4 // divide, held, "AdamW steps these" + where))
        state = 4 if keeps_masters or e == 4 else e
        zero2_split = run.processes if run.engine == "zero2" and run.processes > 1 else 1
        items.append(MemoryItem(f"{name} AdamW moments", 2 * count * state // divide // zero2_split, held,
                                f"2 x {state} bytes per parameter" + where))
    items.append(MemoryItem(f"{name} gradients", count * e // divide, (RM_UPDATE, RM_STEP),
                            f"in {dtype}, until the RM's optimizer step", gpu_measured=True))
    # an update pass holds both sides of at most the step's pairs (one a group; two with `negative: mixed`), over
    # every process; an LLM assistant's negative may run REPLY_EXTRA_TOKENS past the completion it rewrites
    pairs = run.groups * run.processes * (2 if params.negative == "mixed" else 1)
    longest = min(RM_MAX_LENGTH, run.rm_input_tokens + (REPLY_EXTRA_TOKENS if _llm_assistant(params) else 0),
                  shape.max_position_embeddings)
    rows, length = rm_passes(params, params.batch_size, longest, 2 * pairs)
    checkpointing = params.gradient_checkpointing
    items.append(MemoryItem(f"{name} update activations", activation_bytes(
        shape, rows, length, dtype=dtype, attn_implementation="sdpa", gradient_checkpointing=checkpointing,
        head="score"), (RM_UPDATE,), f"{rows} sequences (pairs' two sides) x {length} tokens per pass, gradient "
        f"checkpointing {'on' if checkpointing else 'off'}", gpu_measured=True))
    # the RM computes in its own dtype (no autocast): its residual stream is in rm_dtype too; one layer's whether or
    # not it is checkpointed (recomputation keeps more, counted above, not these)
    items.append(MemoryItem(f"{name} backward's activation gradients (one layer, transient)", activation_gradient_bytes(
        shape, rows * length, e, e), (RM_UPDATE,), f"the gradients of one layer's MLP intermediates and hidden states "
        f"while backward runs through it ({rows} x {length} tokens per pass; one layer's with or without checkpointing)"))
    if not optimizer_offload or steps_on_device:
        # rewards/cooper/learner.py steps AdamW one tensor at a time: the largest tensor's float32 gradient (for masters) and
        # AdamW's temporaries for it (~2 float32 copies), never a copy of every gradient at once
        largest = max(shape.vocab_size * shape.hidden_size, shape.hidden_size * shape.intermediate_size) // divide
        items.append(MemoryItem(f"{name} optimizer step", largest * ((4 if keeps_masters else 0) + 8), (RM_STEP,),
                                "one tensor at a time: its float32 gradient and AdamW's temporaries"))
    # the scoring pass reads the step's rollouts (at most `batch_size` of them at a time)
    rows, length = rm_passes(params, params.batch_size, min(run.rm_input_tokens, shape.max_position_embeddings),
                             run.completions)
    items.append(MemoryItem(f"{name} scoring pass", scoring_bytes(shape, rows, length, dtype), (SCORING,),
                            f"no grad: one layer's working set, {rows} sequences x {length} tokens", gpu_measured=True))
    if params.anchor > 0:
        items.insert(1, MemoryItem(f"{name} anchor weights", count * 4 // divide, ALL, "θ_0, float32 (anchor)"))
    return items


def _llm_assistant(params: Any) -> bool:
    """Whether the negatives are an LLM's rewrites (a local model or an endpoint), which may be longer than the
    rollout they rewrite; the offline perturbation keeps its length, rollout negatives are rollouts."""
    if params.negative == "rollout":
        return False
    assistant = params.assistant
    return not (isinstance(assistant, str) and assistant in NO_MODEL)


def _rm_levers(params: Any, run: PlannedRun, items: list[MemoryItem]) -> list[Lever]:
    """The RM's memory settings not yet on, each with its cost from the RM's planned items; none for an RM sharded
    like the policy (coreward train refuses them)."""
    if run.shards_like_the_policy:
        return []
    key = f"{run.key}.params"
    held = {item.name.split(" Cooper RM ", 1)[-1]: item for item in items}
    weights = held["weights"].bytes
    count = weights // DTYPE_BYTES[params.rm_dtype]
    state = sum(held[name].bytes for name in ("float32 masters", "AdamW moments") if name in held)
    levers = []
    if not params.gradient_checkpointing:
        levers.append(Lever.setting(f"{key}.gradient_checkpointing=true", recompute_cost("RM update")))
    budgets = tuple((f"{key}.max_tokens_per_pass={budget}",) for budget in (8192, 4096, 2048)
                    if (params.max_tokens_per_pass or 1 << 60) > budget)
    if budgets:
        now = held["update activations"].note.split(" per pass")[0]
        levers.append(Lever(budgets, f"the RM update in more, smaller passes than {now} (the same tokens, less "
                                     "parallel work per pass)"))
    if not params.param_offload:
        levers.append(Lever.setting(f"{key}.param_offload=true", copy_cost(weights, "the RM's weights")))
    if not params.optimizer_offload:
        levers.append(Lever.setting(f"{key}.optimizer_offload=true",
                                    copy_cost(state, "the RM's AdamW state and float32 masters")))
    elif params.optimizer_offload_step == "device":
        levers.append(Lever.setting(f"{key}.optimizer_offload_step=cpu",
                                    f"the RM's AdamW step runs on the CPU over {parameters_text(count)}, reading "
                                    f"and writing its {format_bytes(state)} of state in host memory each step in "
                                    "place of copying it to the GPU and back"))
    return levers


def assistant_request_tokens(run: PlannedRun, prompt: str = "coreward") -> int:
    """One assistant request's tokens at most (assistant.py): its system prompt and template around the question
    and the positive (at most a prompt and a completion), and its reply: the positive's words + REPLY_EXTRA_TOKENS."""
    system, user = PROMPTS.get(prompt, PROMPTS["coreward"])
    return len(system) + len(user) + 2 * run.seq_len + REPLY_EXTRA_TOKENS
