"""Which weights an optimizer may update in low precision, and how to tell when its updates round away.

AdamW's step on a weight w is about the learning rate η in size (its update is m̂/(√v̂+ε), of order 1, times η).
A bf16 weight keeps 8 significant bits, so a step smaller than half the spacing of bf16 numbers around w
(half an ulp: 2^(⌊log₂|w|⌋ − 8)) rounds back to w: at |w| ≈ 0.02 that is ~6e-5, and the papers' policy lr 1e-6
and Cooper's RM lr 1e-5 are far below it. So coreward trains with float32 weights whenever a model computes in
bf16/fp16 (grpo/train.py for the policy, rewards/cooper/learner.py for Cooper's RM, rewards/co_rewarding_2/ema_teacher.py's float32 EMA for
Co-rewarding-II's teacher), and steps low-precision weights in place only when a config names it
(`model.master_weights: none`, Cooper's `master_weights: none`), with the warning below.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


LOW_PRECISION = (torch.bfloat16, torch.float16)


def is_low_precision(dtype: torch.dtype | str | None) -> bool:
    """bf16 / fp16 (a torch dtype or its name, as configs spell it)."""
    if isinstance(dtype, str):
        return dtype in ("bfloat16", "float16")
    return dtype in LOW_PRECISION


def mixed_precision_flags(dtype: str, launcher: str | None, bf16_device: bool) -> dict[str, bool]:
    """The trainer's bf16/fp16 (accelerate's mixed precision: autocast over float32 weights) before a config's own
    `grpo` keys: the launcher's mixed_precision when `accelerate launch` set one; else the compute dtype that
    `model.dtype` names; else bf16 on a device that has it. The one rule the run (grpo/train.py) and the memory plan
    (grpo/plan/settings.py) read."""
    if launcher:
        return {"bf16": launcher == "bf16", "fp16": launcher == "fp16"}
    if is_low_precision(dtype):
        return {"bf16": dtype == "bfloat16", "fp16": dtype == "float16"}
    return {"bf16": bf16_device, "fp16": False}


def half_ulp(weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Half the spacing of `dtype`'s numbers around each weight: the smallest change that survives rounding."""
    magnitude = weights.detach().float().abs().clamp_min(torch.finfo(dtype).tiny)
    return torch.exp2(torch.floor(torch.log2(magnitude))) * torch.finfo(dtype).eps / 2


def rounded_away_fraction(parameters: Iterable[torch.Tensor], lr: float, dtype: torch.dtype,
                          sample: int = 1 << 20) -> float:
    """The share of the weights (up to `sample` of them, spread over every tensor) whose half-ulp in `dtype`
    exceeds `lr`: where an AdamW step of size ~lr rounds back to the weight it started from."""
    tensors = [p.detach().reshape(-1) for p in parameters if p.numel() and p.is_floating_point()]
    total = sum(t.numel() for t in tensors)
    if not total:
        return 0.0
    lost = counted = 0
    for t in tensors:
        take = max(1, round(sample * t.numel() / total))
        values = t[:: max(1, t.numel() // take)].cpu()  # a local shard (FSDP2's DTensor) is read as it is
        lost += int((half_ulp(values, dtype) > lr).sum())
        counted += values.numel()
    return lost / counted


def round_away_warning(what: str, key: str, parameters: Iterable[torch.Tensor], lr: float,
                       dtype: torch.dtype) -> str | None:
    """A warning line when low-precision weights are stepped in place at a learning rate that rounds away for
    most of them (None when under a tenth of the weights are affected)."""
    share = rounded_away_fraction(parameters, lr, dtype)
    if share < 0.1:
        return None
    name = str(dtype).removeprefix("torch.")
    return (f"warning: {what} is updated in {name} with no float32 master weights ({key}: none), and its learning "
            f"rate {lr:g} is below half a {name} rounding step for {share:.0%} of its weights: AdamW's updates of "
            f"those round away and the model barely moves. Remove {key} (float32 master weights, the default) "
            "unless this is what you want to reproduce")


def update_norm(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """‖after − before‖₂ over the tensors both state dicts hold (float64 sums: tiny updates stay visible)."""
    total = 0.0
    for name, old in before.items():
        if name in after and old.is_floating_point():
            total += float((after[name].double() - old.double()).pow(2).sum())
    return total ** 0.5
