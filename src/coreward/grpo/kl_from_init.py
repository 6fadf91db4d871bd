"""KL of the policy from its initial weights, logged every step: the x-axis of an overoptimization curve.

Gao, Schulman and Hilton (2022, "Scaling Laws for Reward Model Overoptimization") plot the proxy reward and
the true reward against d = √KL(π ‖ π_init). Here the true reward is the rule verifier's accuracy of the same
rollouts (`verified_accuracy`), the proxy is the training `reward`, and the KL is estimated from the step's
own samples y ~ π (before the step's update), token by token with the low-variance k3 estimator:

    r_t  = log π_init(y_t | y_<t) − log π(y_t | y_<t)
    k3_t = exp(r_t) − r_t − 1   ≥ 0,  E_{y_t ~ π}[k3_t] = KL(π(·|y_<t) ‖ π_init(·|y_<t))
    kl/from_init            = mean over completions of Σ_t k3_t   (sequence KL, nats: Gao et al.'s quantity)
    kl/from_init_per_token  = Σ k3_t / number of tokens            (comparable to TRL's `kl`)

Log-probabilities are TRL's (`_get_per_token_logps_and_entropies`: logits divided by the sampling temperature),
for the policy and the initial policy alike. The policy's cost nothing extra: TRL's `old_per_token_logps` when
it computed them, else (on-policy rollouts) the loss's own pass over each micro-batch, before any update.

Where π_init comes from, cheapest first:
  * "reference": TRL's reference model when `grpo.beta > 0` and nothing moves it (no `sync_ref_model`, no
    Co-rewarding-II teacher used as the reference): it *is* the initial policy and TRL already computed
    its log-probabilities. Cost: none.
  * "adapter_off": a LoRA policy with its adapter disabled (as TRL's own reference). Cost: one no-grad forward
    pass over the generation batch per step.
  * "copy": a frozen copy of the initial policy, built from its config and a copy of its state_dict (never
    `copy.deepcopy`: a TRL-wrapped policy's patched `forward` would still close over the live policy). Cost:
    one more set of the policy's weights in memory (no gradients, no optimizer state: about a quarter of what
    the policy itself holds under AdamW in float32) and one no-grad forward pass of the copy over the
    generation batch per step, i.e. about a third of a training update's compute (`time/kl_from_init`).
Turn it off with `kl_from_init: false` in the config.
"""

from __future__ import annotations

from typing import Any

import torch


SOURCES = ("reference", "adapter_off", "copy")


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
