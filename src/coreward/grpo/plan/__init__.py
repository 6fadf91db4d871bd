"""The memory plan of a training run: what one GRPO step holds per device, phase by phase, from the config and the
models' config.json alone (no weights load). `coreward plan` prints it; `coreward train` checks it before loading.

A step has five phases; an item counts in every phase it is held through:

    generation        vLLM's reservation (colocated) or transformers' key/value cache
    reward scoring    the reward models' no-grad passes (and a no-grad pass of the policy for logit rewards)
    RM update         a learned reward model's forward and backward: its gradients and one pass's kept activations
    RM step           its optimizer step: float32 gradient copies and AdamW's temporaries
    policy update     the policy's gradients, one micro-batch's kept activations and the log-probability head's tiles

The engine's part, a page each: the policy's states and copies (model_states.py, divided by the engine as
sharding.py says), generation (generation.py), the policy's update (activations.py), the step's batch and lengths
(lengths.py). Each reward source declares its own part (`RewardSource.memory_needs`, rewards/memory.py: a model's
weights, optimizer state, the activations of its passes, a teacher copy); step.py sums them; the plan names no
method. A plan over the device comes with advice (advice.py: the settings that lower it, levers.py and the
sources'). Each term's formula and the plan's measured accuracy: docs/explanation/memory-model.md; the shape arithmetic:
runtime/memory.py.
"""

from __future__ import annotations

from coreward.grpo.plan.advice import candidate_settings, plan_with_suggestions, replan, suggest
from coreward.grpo.plan.check import check_before_loading, plan_before_loading
from coreward.grpo.plan.hardware import (
    ENGINE_OF_ACCELERATE_CONFIG,
    ENGINES,
    Hardware,
    declared_hardware,
    machine_ram_bytes,
    memory_size,
    processes,
    resolve_hardware,
    running_hardware,
)
from coreward.grpo.plan.lengths import data_tokenizer, logged_completion_tokens, prompt_token_bound
from coreward.grpo.plan.result import SPARE, Item, Plan, Suggestion
from coreward.grpo.plan.sharding import CPU_BASELINE_BYTES, CUDA_CONTEXT_BYTES
from coreward.grpo.plan.step import plan_run
from coreward.rewards.memory import ALL, PHASES, RM_MAX_LENGTH


__all__ = [
    "ALL", "CPU_BASELINE_BYTES", "CUDA_CONTEXT_BYTES", "ENGINES", "ENGINE_OF_ACCELERATE_CONFIG", "Hardware", "Item",
    "PHASES", "Plan", "RM_MAX_LENGTH", "SPARE", "Suggestion", "candidate_settings", "check_before_loading",
    "data_tokenizer", "declared_hardware", "logged_completion_tokens", "machine_ram_bytes", "memory_size", "plan_before_loading", "plan_run",
    "plan_with_suggestions", "processes", "prompt_token_bound", "replan", "resolve_hardware", "running_hardware",
    "suggest",
]
