"""The loss's pass with each prompt run once for its completions (grpo/shared_prompts.py): every token's
log-probability, entropy and the gradient are those of TRL's pass over whole rows, for fewer tokens."""

from __future__ import annotations

import contextlib
import itertools
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.utils import add_fused_lm_head

import coreward.grpo.shared_prompts as shared_prompts
from coreward.grpo.fused_head import compact_on_cpu
from coreward.grpo.shared_prompts import length_chunks, prompt_grouped, shared_prompt_pass, why_not_shared


pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPT_WIDTH, COMPLETION_WIDTH = 7, 6


def tiny_causal_lm() -> LlamaForCausalLM:
    """A 2-layer Llama with TRL's fused log-probability head patched on, as TRL patches the policy."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model


def lora_policy(dropout: float = 0.0):
    base = tiny_causal_lm()
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:  # adapters off zero, so their gradients depend on every input
                param.normal_(0, 0.1)
    return model.train()


def grpo_rows(prompt_lengths=(7, 5, 4), completions=3, seed=1):
    """[left-padded prompt | right-padded completion] rows, `completions` a prompt, in shuffled order."""
    generator = torch.Generator().manual_seed(seed)
    ids, mask = [], []
    for length in prompt_lengths:
        prompt = torch.randint(1, 300, (length,), generator=generator)
        for _ in range(completions):
            n = int(torch.randint(1, COMPLETION_WIDTH + 1, (), generator=generator))
            row, row_mask = torch.zeros(PROMPT_WIDTH + COMPLETION_WIDTH, dtype=torch.long), torch.zeros(
                PROMPT_WIDTH + COMPLETION_WIDTH, dtype=torch.long)
            row[PROMPT_WIDTH - length:PROMPT_WIDTH], row_mask[PROMPT_WIDTH - length:PROMPT_WIDTH] = prompt, 1
            row[PROMPT_WIDTH:PROMPT_WIDTH + n] = torch.randint(1, 300, (n,), generator=generator)
            row_mask[PROMPT_WIDTH:PROMPT_WIDTH + n] = 1
            ids.append(row)
            mask.append(row_mask)
    order = torch.randperm(len(ids), generator=generator)
    return torch.stack(ids)[order], torch.stack(mask)[order]


def trls_pass(model, ids, mask):
    """TRL 1.16's `_get_per_token_logps_and_entropies` over whole rows (its labels, its fused head)."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-COMPLETION_WIDTH] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -COMPLETION_WIDTH:], out.entropy[:, -COMPLETION_WIDTH:]


def with_gradient(model, run):
    model.zero_grad()
    logps, entropies = run()
    weights = torch.linspace(0.5, 1.5, logps.numel()).view_as(logps)  # a misplaced token changes the gradient
    (logps * weights).sum().backward()
    return logps.detach(), entropies.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                if p.grad is not None}


def bf16_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


@pytest.mark.parametrize(("overhead", "autocast"), [(10**6, contextlib.nullcontext), (0, contextlib.nullcontext),
                                                    (0, bf16_autocast)], ids=["one-chunk", "chunks-by-length", "bf16"])
def test_each_prompt_once_gives_trls_log_probabilities_and_gradient(monkeypatch, overhead, autocast):
    """float32, and bf16 autocast (what grpo.bf16 runs: both passes under it, compared at bf16's precision)."""
    compact_on_cpu()
    monkeypatch.setattr(shared_prompts, "PASS_OVERHEAD_TOKENS", overhead)
    model = lora_policy()
    ids, mask = grpo_rows()
    prompts_seen = []
    handle = model.get_base_model().base_model.register_forward_pre_hook(
        lambda module, args, kwargs: prompts_seen.append(kwargs["input_ids"].shape), with_kwargs=True)
    shared = with_gradient(model, lambda: shared_prompt_pass(model, model.get_base_model(), ids, mask,
                                                             COMPLETION_WIDTH, True, autocast))
    handle.remove()
    with autocast():
        full = with_gradient(model, lambda: trls_pass(model, ids, mask))
    tolerance = {"rtol": 2e-2, "atol": 2e-2} if autocast is bf16_autocast else {"rtol": 1e-5, "atol": 1e-5}

    # the backbone ran the 3 prompts once (6 of their 7 columns), then the 9 rows' last prompt token + completion
    assert prompts_seen[0] == (3, PROMPT_WIDTH - 1)
    assert sum(shape[0] for shape in prompts_seen[1:]) == 9
    assert len(prompts_seen) == (2 if overhead else 1 + len(length_chunks(mask[:, -COMPLETION_WIDTH:].sum(1).tolist(), 0)))
    torch.testing.assert_close(shared[0], full[0], **tolerance)
    torch.testing.assert_close(shared[1], full[1], **tolerance)
    assert (shared[0] != 0).sum() == mask[:, -COMPLETION_WIDTH:].sum()  # each completion token scored, padding 0
    assert shared[2].keys() == full[2].keys() and len(full[2]) == 28  # every adapter of both layers
    for name, grad in full[2].items():
        assert grad.abs().sum() > 0, name
        if autocast is bf16_autocast:  # bf16 products: the gradient agrees in direction and size to a few percent
            cosine = torch.nn.functional.cosine_similarity(shared[2][name].flatten(), grad.flatten(), dim=0)
            assert cosine > 0.99 and abs(shared[2][name].norm() / grad.norm() - 1) < 0.05, name
        else:
            torch.testing.assert_close(shared[2][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_nothing_to_share_leaves_the_pass_to_trl():
    model = lora_policy()
    ids, mask = grpo_rows(completions=1)  # three rows, three prompts
    assert shared_prompt_pass(model, model.get_base_model(), ids, mask, COMPLETION_WIDTH, False,
                              contextlib.nullcontext) is None


def test_rows_are_grouped_by_prompt_then_length_with_every_field_in_step():
    ids, mask = grpo_rows()
    batch = {"prompt_ids": ids[:, :PROMPT_WIDTH], "prompt_mask": mask[:, :PROMPT_WIDTH],
             "completion_ids": ids[:, PROMPT_WIDTH:], "completion_mask": mask[:, PROMPT_WIDTH:],
             "advantages": torch.arange(9.0), "prompt_text": [f"row {i}" for i in range(9)],
             "num_items_in_batch": mask[:, PROMPT_WIDTH:].sum()}
    grouped = prompt_grouped(batch)
    prompts = [tuple(row.tolist()) for row in grouped["prompt_ids"]]
    assert [len(list(run)) for _, run in itertools.groupby(prompts)] == [3, 3, 3]  # each prompt's rows together
    lengths = grouped["completion_mask"].sum(dim=1).tolist()
    for start in (0, 3, 6):
        assert lengths[start:start + 3] == sorted(lengths[start:start + 3])
    order = [int(text.split()[1]) for text in grouped["prompt_text"]]
    for key in ("prompt_ids", "completion_ids", "advantages"):
        assert torch.equal(grouped[key], batch[key][order])
    assert torch.equal(grouped["num_items_in_batch"], batch["num_items_in_batch"])


def test_length_chunks_is_the_cheapest_cut_of_the_sorted_rows():
    lengths = [3, 40, 5, 38, 64, 4, 61, 39]
    chunks = length_chunks(lengths, overhead=32)
    assert sorted(row for chunk in chunks for row in chunk) == list(range(8))
    cost = sum(len(c) * max(lengths[r] for r in c) + 32 for c in chunks)
    ordered = sorted(range(8), key=lambda r: lengths[r])
    best = min(sum(len(part) * max(lengths[r] for r in part) + 32 for part in
                   (ordered[a:b] for a, b in zip((0, *cuts), (*cuts, 8))))
               for k in range(8) for cuts in itertools.combinations(range(1, 8), k))
    assert cost == best
    assert length_chunks(lengths, overhead=10**6) == [ordered]  # a pass costing more than any padding: one chunk


def test_sharing_is_refused_where_it_would_change_the_step_or_cannot_run():
    args = SimpleNamespace(loss_type="dapo", steps_per_generation=4, gradient_accumulation_steps=4,
                           top_entropy_quantile=1.0, activation_checkpointing=False)
    policy = lora_policy()
    assert why_not_shared(args, policy, sharded=False, paired_views=False) is None
    assert why_not_shared(args, policy, sharded=True, paired_views=False)
    assert why_not_shared(args, policy, sharded=False, paired_views=True)
    for change in ({"loss_type": "bnpo"}, {"steps_per_generation": 8}, {"activation_checkpointing": True},
                   {"top_entropy_quantile": 0.2}):
        assert why_not_shared(SimpleNamespace(**{**vars(args), **change}), policy, sharded=False, paired_views=False)
    policy.config.layer_types = ["full_attention", "sliding_attention"]
    assert "layer types" in why_not_shared(args, policy, sharded=False, paired_views=False)
    policy.config._attn_implementation = "flash_attention_2"
    assert "attention" in why_not_shared(args, policy, sharded=False, paired_views=False)
