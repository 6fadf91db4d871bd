"""KL of the policy from its initial weights, logged every step: the x-axis of an overoptimization curve.

Gao, Schulman and Hilton (2022) plot the proxy and the true reward against d = √KL(π ‖ π_init); here the true
reward is the rule verifier's accuracy of the same rollouts (`verified_accuracy`) and the KL is taken on the step's
own samples y ~ π, token by token. Two estimators (`kl_from_init_estimator`):

  * "exact" (the default): KL_t = Σ_v π(v | y_<t) (log π(v | y_<t) − log π_init(v | y_<t)), summed over the
    completion. Its expectation is k3's, without the noise of sampling y_t at each position (a Rao-Blackwellization),
    so the √KL axis goes backwards on fewer steps (docs/explanation/guard.md, "A steadier √KL axis").
  * "k3": exp(r_t) − r_t − 1 with r_t = log π_init(y_t | y_<t) − log π(y_t | y_<t), from the sampled tokens'
    log-probabilities alone: free where they exist, noisy (a rare token π sampled adds a large term).

Logged: `kl/from_init` (the sequence KL in nats, Gao et al.'s quantity), `kl/from_init_per_token` (comparable to
TRL's `kl`) and, with "exact", `kl/from_init_k3` on the same samples. Distributions are TRL's (logits divided by the
sampling temperature).

Why hidden states: TRL 1.16's log-probability pass (`add_fused_lm_head`) never materializes the logits, so "exact"
keeps each model's last hidden state at the completion positions (`completion_hidden_states`) and projects both
through their LM heads with TRL's chunked kernel, a bounded tile at a time (`MAX_LOGIT_ELEMENTS`). Where it can,
the policy's side comes from the loss's own pass, so a step pays one no-grad forward (π_init's) and the projections
(docs/figures.md gives the measured cost).

Where π_init comes from, cheapest first: TRL's reference model when `grpo.beta > 0` and nothing moves it (no
`sync_ref_model`, no reward source that moves it: `RewardSource.moves_reference`); a LoRA policy with its adapter
off; else a frozen copy of the initial policy (`runtime/model_copy.py`: one more set of weights, no gradients or
optimizer state). k3 is used, with a line saying why, where an LM head cannot be read as one projection (a
LoRA-wrapped head). `kl_from_init: false` turns the metric off.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


SOURCES = ("reference", "adapter_off", "copy")
ESTIMATORS = ("exact", "k3")
# float32 logit elements (positions × vocabulary, both models' tiles together) one exact-KL projection holds at
# once: 2^27 is 0.5 GiB, the bound grpo/token_stats.py uses for its own whole-vocabulary statistics
MAX_LOGIT_ELEMENTS = 2**27


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of the initial policy that computes with its own tensors (`own_copy`, the one way coreward
    copies a model): changing `model` afterwards leaves it untouched (tests/grpo/test_kl_from_init.py perturbs
    the policy and checks the copy's logits). The run's random numbers are left as they were."""
    from coreward.runtime.model_copy import own_copy

    with torch.random.fork_rng(devices=[]):
        return own_copy(model)


def sequence_k3(policy_logps: torch.Tensor, init_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ_t k3_t per completion ([B, T] log-probabilities of the sampled tokens and their mask) -> [B]."""
    r = (init_logps - policy_logps).float()
    k3 = torch.exp(r) - r - 1
    return (k3 * mask).sum(dim=1)


def moves_reference(trainer: Any) -> bool:
    """Whether the KL reference drifts from the initial policy during the run (then it is no π_init): TRL syncs it,
    or a reward source changes it (`RewardSource.moves_reference`)."""
    if getattr(trainer.args, "sync_ref_model", False):
        return True
    return any(source.moves_reference() for source in trainer.reward_sources)


# --------------------------------------------------------------------------- exact KL over the whole vocabulary
def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a PEFT wrapper (an unwrapped model is returned as it is)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def unreadable_head(model: torch.nn.Module) -> str | None:
    """Why the exact KL cannot project `model`'s last hidden states itself (None when it can): it reads the LM
    head's weight and bias as one linear map, as TRL's fused head does."""
    head = causal_lm(model).get_output_embeddings()
    if head is None or getattr(head, "weight", None) is None:
        return f"{type(causal_lm(model)).__name__} has no output embeddings to project with"
    if hasattr(head, "base_layer"):  # a PEFT tuner wraps the head: its weight alone is not the map
        return "its LM head is wrapped by a PEFT adapter"
    return None


@contextmanager
def completion_hidden_states(model: torch.nn.Module, width: int) -> Iterator[list[torch.Tensor]]:
    """Inside, each forward of `model` appends its backbone's last hidden state at the positions that predict the
    last `width` tokens ([B, width, H]): the LM head's input, as TRL's fused head computes it (`add_fused_lm_head`
    calls the backbone, `base_model`, then projects `last_hidden_state[:, :-1]` against the labels `[:, 1:]`)."""
    captured: list[torch.Tensor] = []

    def keep(_module, _inputs, output):
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        captured.append(hidden[:, -width - 1 : -1].detach())

    handle = causal_lm(model).base_model.register_forward_hook(keep)
    try:
        yield captured
    finally:
        handle.remove()


def logit_transform(model: torch.nn.Module) -> tuple[float, float | None]:
    """(logit_scale, final_logit_softcapping) as TRL's fused head reads them from the config (trl/trainer/utils.py
    `add_fused_lm_head`): logits = softcap·tanh(scale·(h·Wᵀ + b)/softcap), then divided by the temperature."""
    config = causal_lm(model).config.get_text_config()
    scale = getattr(config, "logit_scale", None)
    if scale is None:
        scale = getattr(config, "output_multiplier", None)
    if scale is None:
        scale = getattr(config, "lm_head_multiplier", None)
    if scale is None and getattr(config, "logits_scaling", None) is not None:
        scale = config.logits_scaling if config.model_type == "hyperclovax" else 1 / config.logits_scaling
    return (1.0 if scale is None else scale), getattr(config, "final_logit_softcapping", None)


def full_head(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The LM head's weight and bias as whole tensors: FSDP2 shards them as DTensors (gathered here, as TRL's
    distillation loss does); DeepSpeed ZeRO-3 partitions are gathered by `gathered_heads` around their use."""
    from torch.distributed.tensor import DTensor

    head = causal_lm(model).get_output_embeddings()
    weight, bias = head.weight, head.bias
    if isinstance(weight, DTensor):
        weight = weight.full_tensor()
        bias = bias.full_tensor() if bias is not None else None
    return weight, bias


@torch.no_grad()
def token_kl(
    policy_hidden: torch.Tensor,
    policy: torch.nn.Module,
    init_hidden: torch.Tensor,
    init: torch.nn.Module,
    mask: torch.Tensor,
    temperature: float = 1.0,
    max_logit_elements: int = MAX_LOGIT_ELEMENTS,
) -> torch.Tensor:
    """KL_t = Σ_v π(v|y_<t) (log π(v|y_<t) − log π_init(v|y_<t)) at each completion position ([B, T] hidden states'
    positions; 0 where `mask` is 0), π = softmax(transform(h·Wᵀ + b) / temperature) for each model's own hidden
    states h and LM head (W, b) (`logit_transform`).

    TRL's kernel (reverse KL, beta = 1, of its distillation loss) projects tiles of at most 4,096 positions × 32,768
    vocabulary ids for each model in float32; positions are handed to it in pieces small enough that both tiles
    stay under `max_logit_elements`. Every process makes the same gathers whatever its number of tokens (one per
    call), so a ZeRO-3 or FSDP2 run cannot hang on a process with more pieces than another."""
    from trl.kernels.chunked_divergence import VOCAB_CHUNK_SIZE, ChunkedDivergenceFunction
    from trl.trainer.utils import maybe_gather_lm_head_ctx

    valid = mask.reshape(-1) != 0
    h_policy = policy_hidden.reshape(-1, policy_hidden.size(-1))[valid]
    h_init = init_hidden.reshape(-1, init_hidden.size(-1))[valid]
    (w_policy, b_policy), (w_init, b_init) = full_head(policy), full_head(init)
    (scale_policy, cap_policy), (scale_init, cap_init) = logit_transform(policy), logit_transform(init)
    piece = max(1, max_logit_elements // (2 * VOCAB_CHUNK_SIZE))
    kl = torch.zeros(valid.shape, dtype=torch.float32, device=policy_hidden.device)
    pieces = []
    # outside autocast: the projections run in the hidden states' own dtype into float32 tiles
    with (torch.autocast(policy_hidden.device.type, enabled=False), maybe_gather_lm_head_ctx(w_policy, b_policy),
          maybe_gather_lm_head_ctx(w_init, b_init)):
        for start in range(0, h_policy.size(0), piece):
            rows = slice(start, start + piece)
            divergence, _ = ChunkedDivergenceFunction.apply(
                h_policy[rows], w_policy, b_policy, h_init[rows].to(h_policy.device), w_init, b_init,
                1.0, temperature, scale_policy, cap_policy, scale_init, cap_init)
            pieces.append(divergence)
    if pieces:
        # a KL is ≥ 0; the kernel's Σ p·(z_π − z_init) − log Z_π + log Z_init can round to −1e-8 where π = π_init
        kl[valid] = torch.cat(pieces).float().clamp(min=0)
    return kl.view(mask.shape) * mask
