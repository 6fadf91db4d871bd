"""KL of the policy from its initial weights, logged every step: the x-axis of an overoptimization curve.

Gao, Schulman and Hilton (2022, "Scaling Laws for Reward Model Overoptimization") plot the proxy reward and
the true reward against d = √KL(π ‖ π_init). Here the true reward is the rule verifier's accuracy of the same
rollouts (`verified_accuracy`), the proxy is the training `reward`, and the KL is measured on the step's own
samples y ~ π (before the step's update), token by token. Two estimators (`kl_from_init_estimator`):

  * "exact" (the default): the whole-vocabulary KL of each next-token distribution along the sampled prefix,

        KL_t = Σ_v π(v | y_<t) (log π(v | y_<t) − log π_init(v | y_<t)),

    summed over the completion. By the chain rule E_y[Σ_t KL_t] = KL(π ‖ π_init) over whole completions, the
    same quantity k3 estimates; it only leaves out the sampling of y_t itself at each position (a
    Rao-Blackwellization of k3), so a step's value jumps less from one step to the next.
  * "k3": the low-variance sampled estimator, from the log-probabilities of the sampled tokens only,

        r_t  = log π_init(y_t | y_<t) − log π(y_t | y_<t)
        k3_t = exp(r_t) − r_t − 1   ≥ 0,  E_{y_t ~ π}[k3_t] = KL_t

    A step's value is noisy: a rare token that π samples although it made it much less likely than π_init did
    adds exp(r) − r − 1 with r large, so a curve drawn against √KL zig-zags backwards.
What "exact" removes is the noise of sampling y_t at each position; what remains is the noise of which prompts
and prefixes a step draws (16 prompts a step in the demo). Measured on one demo run (docs/overoptimization.md,
"A steadier √KL axis"): the mean step-to-step change of kl/from_init 0.68 nats instead of k3's 1.15, yet √KL still
goes back on 24 of 59 steps (k3: 30).

Logged: `kl/from_init` (mean over completions of Σ_t KL_t: the sequence KL in nats, Gao et al.'s quantity),
`kl/from_init_per_token` (Σ KL_t / number of tokens, comparable to TRL's `kl`) and, with "exact", also
`kl/from_init_k3` (k3 on the same samples, free once both passes ran: the two can be compared on one run).
Distributions are TRL's: logits divided by the sampling temperature (`_get_per_token_logps_and_entropies`).

Where the distributions come from. TRL 1.16's log-probability pass (`add_fused_lm_head`) never materializes
the logits: it projects the backbone's last hidden state through the LM head in tiles and keeps only the
sampled token's log-probability (plus, if asked, the entropy), so no pass of TRL's leaves a distribution to
compare with. "exact" therefore keeps each model's last hidden state at the completion positions (a forward
hook on the backbone during that same pass: `completion_hidden_states`) and projects both through their LM
heads with TRL's own chunked kernel (`trl.kernels.chunked_divergence.ChunkedDivergenceFunction`, the reverse
KL of its distillation loss), a bounded tile of positions × vocabulary at a time (`MAX_LOGIT_ELEMENTS`).

Where π_init comes from, cheapest first:
  * "reference": TRL's reference model when `grpo.beta > 0` and nothing moves it (no `sync_ref_model`, no
    Co-rewarding-II teacher used as the reference): it *is* the initial policy. k3 cost: none (TRL computed
    its log-probabilities). exact: one no-grad forward of the reference (TRL's pass keeps no distribution).
  * "adapter_off": a LoRA policy with its adapter disabled (as TRL's own reference). Cost: one no-grad forward
    pass over the generation batch per step.
  * "copy": a frozen copy of the initial policy, built from its config and a copy of its state_dict (never
    `copy.deepcopy`: a TRL-wrapped policy's patched `forward` would still close over the live policy). Cost:
    one more set of the policy's weights in memory (no gradients, no optimizer state: about a quarter of what
    the policy itself holds under AdamW in float32) and one no-grad forward pass of the copy over the
    generation batch per step, i.e. about a third of a training update's compute (`time/kl_from_init`).
The policy's side: k3 takes TRL's `old_per_token_logps` when it computed them, else (on-policy rollouts) the
loss's own pass over each micro-batch, before any update: free. exact does the same where it can: π_init's pass at
scoring time keeps π_init's hidden states at the completion positions, which travel with their rows through TRL's
shuffle to the loss, and the loss's own pass of the policy gives the policy's hidden states (a hook on its
backbone), so the step pays one no-grad forward pass (π_init's) and the two projections. That holds for on-policy
rollouts, a copy or reference π_init, one process or DDP, and π_init's hidden states of the generation batch under
256 MiB a process (`KEEP_INIT_HIDDEN_BYTES` in grpo/trainer.py: the demo's take 2 MiB; 3,072-token completions of
a 1.5B model would take gigabytes). Elsewhere (ZeRO-3 and FSDP2, whose LM heads are gathered for the projection;
LoRA's adapter-off π_init; larger batches) exact runs a no-grad forward of the policy at scoring time too, chunk by
chunk beside π_init's, so only one micro-batch's hidden states live at once. Measured on the demo's rule config
(`python -m benchmarks.speed.step_floor --configs rule`, docs/figures.md): the two passes took 0.37 s of a 1.19 s step.
`time/kl_from_init` is the scoring-time part; `time/kl_from_init_in_loss` the projection in the loss's pass.

exact is the default: the KL axis is what the overoptimization curves and the guard read, and its sampled
estimate reverses direction along √KL on most steps (docs/overoptimization.md); its price is one forward pass
(two with a "reference" π_init) without gradients. k3 stays for runs where that pass is too dear, and is used
(with a line saying why) where a model's LM head cannot be read as one projection (a LoRA-wrapped head).
Turn the metric off with `kl_from_init: false` in the config.
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
    from coreward.rewards.teacher_weights import own_copy

    with torch.random.fork_rng(devices=[]):
        return own_copy(model)


def sequence_k3(policy_logps: torch.Tensor, init_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ_t k3_t per completion ([B, T] log-probabilities of the sampled tokens and their mask) -> [B]."""
    r = (init_logps - policy_logps).float()
    k3 = torch.exp(r) - r - 1
    return (k3 * mask).sum(dim=1)


def moves_reference(trainer: Any) -> bool:
    """Whether the KL reference drifts from the initial policy during the run (then it is no π_init)."""
    if getattr(trainer.args, "sync_ref_model", False):
        return True
    return any(getattr(getattr(source, "teacher", None), "as_reference", False) for source in trainer.reward_sources)


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
            divergence, _entropy = ChunkedDivergenceFunction.apply(
                h_policy[rows], w_policy, b_policy, h_init[rows].to(h_policy.device), w_init, b_init,
                1.0, temperature, scale_policy, cap_policy, scale_init, cap_init)
            pieces.append(divergence)
    if pieces:
        # a KL is ≥ 0; the kernel's Σ p·(z_π − z_init) − log Z_π + log Z_init can round to −1e-8 where π = π_init
        kl[valid] = torch.cat(pieces).float().clamp(min=0)
    return kl.view(mask.shape) * mask
