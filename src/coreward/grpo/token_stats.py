"""Per-completion statistics of the policy's own next-token distributions.

For each completion token t with distribution p_t over the vocabulary V:

    entropy_t        = H(p_t) = -Σ_j p_t(j) log p_t(j)
    self_certainty_t = KL(U ‖ p_t) = -log|V| - (1/|V|) Σ_j log p_t(j)      (Intuitor)
    self_certainty_scaled: the same with p_t = softmax(logits / T), T the sampling temperature, as
        Intuitor's verl code does (verl-intuitor/verl/workers/actor/dp_actor.py: `logits.div_(temperature)`
        before `self_certainty_from_logits`); equal to self_certainty at T = 1

and each statistic is averaged over the completion's tokens. One no-grad forward pass, batched, on
the policy's device; the trainer runs it only when a configured reward source asks for it.
"""

from __future__ import annotations

import math

import torch


STATS = ("entropy", "self_certainty", "self_certainty_scaled")


@torch.no_grad()
def completion_token_stats(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    pad_token_id: int,
    batch_size: int = 8,
    temperature: float = 1.0,
    max_logit_elements: int = 2**27,
) -> dict[str, list[float]]:
    """Mean token entropy and self-certainty of each completion under `model`.

    Rows go through in chunks of at most `batch_size`, and fewer where their logits would pass
    `max_logit_elements` (rows × tokens × vocabulary: each float32 copy of them is 4 bytes an element, and the
    statistics make several): at Qwen's 151,936-token vocabulary one 512-token completion's logits are 0.3 GB, so
    a training batch of 64 at once would need ~20 GB per copy."""
    device = next(model.parameters()).device
    vocab = getattr(model.config, "vocab_size", None) or 1
    longest = max((len(p) + len(c) for p, c in zip(prompt_ids, completion_ids)), default=1)
    batch_size = max(1, min(batch_size, max_logit_elements // max(1, longest * vocab)))
    out: dict[str, list[float]] = {name: [] for name in STATS}
    for start in range(0, len(prompt_ids), batch_size):
        prompts = prompt_ids[start : start + batch_size]
        completions = completion_ids[start : start + batch_size]
        input_ids, attention, completion_mask, prompt_width = _pack(prompts, completions, pad_token_id)
        input_ids, attention, completion_mask = (t.to(device) for t in (input_ids, attention, completion_mask))
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        # logits at position i predict token i+1: the completion's tokens are predicted from prompt_width-1 on
        width = completion_mask.shape[1]
        logits = logits[:, prompt_width - 1 : prompt_width - 1 + width].float()
        logp = torch.log_softmax(logits, dim=-1)
        entropy = -(logp.exp() * logp).sum(-1)
        self_certainty = -math.log(logp.shape[-1]) - logp.mean(-1)
        scaled = -math.log(logp.shape[-1]) - torch.log_softmax(logits / temperature, dim=-1).mean(-1)
        counts = completion_mask.sum(1).clamp(min=1)
        for name, per_token in (("entropy", entropy), ("self_certainty", self_certainty),
                                ("self_certainty_scaled", scaled)):
            means = (per_token * completion_mask).sum(1) / counts
            out[name].extend(means.tolist())
    return out


def _pack(prompts, completions, pad_token_id):
    """Left-pad prompts and right-pad completions into one [B, P+C] batch."""
    prompt_width = max(len(p) for p in prompts)
    completion_width = max(1, max(len(c) for c in completions))
    rows, attention, completion_mask = [], [], []
    for p, c in zip(prompts, completions):
        left = prompt_width - len(p)
        right = completion_width - len(c)
        rows.append([pad_token_id] * left + list(p) + list(c) + [pad_token_id] * right)
        attention.append([0] * left + [1] * (len(p) + len(c)) + [0] * right)
        completion_mask.append([1] * len(c) + [0] * right)
    return (
        torch.tensor(rows),
        torch.tensor(attention),
        torch.tensor(completion_mask, dtype=torch.float32),
        prompt_width,
    )
