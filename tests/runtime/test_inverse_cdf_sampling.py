"""Sampling by the inverse CDF (runtime/generation.py): the distribution `generate`'s own sampling draws from
(temperature, top-k, top-p, min-p as transformers' warpers apply them), one uniform number a row."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig

from coreward.runtime import generation
from coreward.runtime.generation import (
    InverseCdfSampler,
    generate_from_ids,
    greedy_with_sampler,
    inverse_cdf_draw,
    nucleus,
)


def frequencies(config: GenerationConfig, scores: torch.Tensor, draws: int) -> torch.Tensor:
    """How often each token is drawn, over `draws` copies of each row sampled at once."""
    torch.manual_seed(0)
    out = InverseCdfSampler(config)(None, scores.repeat_interleave(draws, 0))
    assert ((out == 0).sum(dim=1) == 1).all() and torch.isinf(out).sum() == out.numel() - out.size(0)
    return (out == 0).float().view(scores.size(0), draws, -1).mean(dim=1)


@pytest.mark.parametrize("candidates", [1024, 2])  # 2: the nucleus needs more than the candidates, a full sort
@pytest.mark.parametrize("settings", [{"temperature": 0.7}, {"temperature": 1.3, "top_k": 3},
                                      {"temperature": 0.7, "top_p": 0.8}, {"min_p": 0.1},
                                      {"top_p": 0.8, "min_p": 0.05}])
def test_each_token_is_drawn_as_often_as_the_warped_distribution_says(settings, candidates, monkeypatch):
    monkeypatch.setattr(generation, "NUCLEUS_CANDIDATES", candidates)
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    config = GenerationConfig(do_sample=True, **settings)
    scores = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0], [0.0, 0.0, 0.1, 3.0, -2.0, 1.0]])
    expected = scores.clone()  # transformers' warpers, in generate's order
    for key, warper in (("temperature", TemperatureLogitsWarper), ("top_k", TopKLogitsWarper),
                        ("top_p", TopPLogitsWarper), ("min_p", MinPLogitsWarper)):
        if key in settings:
            expected = warper(settings[key])(None, expected)
    expected = torch.softmax(expected, dim=-1)
    seen = frequencies(config, scores, draws=20000)
    tolerance = 4 * (expected * (1 - expected) / 20000).sqrt() + 1e-3  # 4 standard errors
    assert ((seen - expected).abs() <= tolerance).all(), (seen, expected)
    assert (seen[expected == 0] == 0).all()  # a token a warper removed is never drawn


def test_a_uniform_at_the_top_never_picks_a_token_without_mass():
    """u·total can round up to the total: the draw then takes the last token with mass, not a trailing zero."""
    probs = torch.tensor([[0.2, 0.3, 0.5, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0, 0.9], [0.0, 1.0, 0.0, 0.0, 0.0]])
    top = torch.nextafter(torch.tensor(1.0), torch.tensor(0.0))
    assert inverse_cdf_draw(probs, torch.full((3,), 1.0)).tolist() == [2, 4, 1]
    assert inverse_cdf_draw(probs, top.expand(3)).tolist() == [2, 4, 1]
    assert inverse_cdf_draw(probs, torch.zeros(3)).tolist() == [0, 0, 1]  # a zero-mass first entry is skipped
    assert inverse_cdf_draw(probs, torch.tensor([0.25, 0.05, 0.5])).tolist() == [1, 0, 1]


@pytest.mark.parametrize("candidates", [1024, 40, 3])
def test_the_nucleus_from_ranked_candidates_is_transformers_top_p(candidates, monkeypatch):
    """`nucleus` keeps the tokens transformers' TopPLogitsWarper keeps, whether its candidates cover the nucleus
    (ranked by topk) or not (the whole vocabulary sorted), per row and per top-p."""
    from transformers.generation.logits_process import TopPLogitsWarper

    monkeypatch.setattr(generation, "NUCLEUS_CANDIDATES", candidates)
    torch.manual_seed(0)
    logits = torch.randn(6, 500) * torch.tensor([[0.5], [1.0], [2.0], [4.0], [8.0], [0.1]])
    probs = torch.softmax(logits, dim=-1)
    for top_p in (0.3, 0.9, 0.99):
        ranked, order = nucleus(probs, top_p)
        kept = torch.zeros_like(probs).scatter_(1, order, ranked) > 0
        theirs = torch.isfinite(TopPLogitsWarper(top_p)(None, logits.clone()))
        assert torch.equal(kept, theirs), (candidates, top_p)
        assert torch.equal(torch.zeros_like(probs).scatter_(1, order, ranked)[kept], probs[kept])  # values kept


def test_what_the_sampler_does_not_apply_is_left_to_generate():
    assert greedy_with_sampler(GenerationConfig(do_sample=False)) is None
    assert greedy_with_sampler(GenerationConfig(do_sample=True, typical_p=0.9)) is None
    assert greedy_with_sampler(GenerationConfig(do_sample=True, num_beams=2)) is None
    greedy, _, copies = greedy_with_sampler(GenerationConfig(do_sample=True, temperature=0.7, num_return_sequences=3))
    assert not greedy.do_sample and greedy.num_return_sequences == 1 and copies == 3


def test_generate_returns_each_prompts_sequences_together_and_repeats_with_its_seed(tiny_policy):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy)
    prompts = [tokenizer("What is 2 + 3?")["input_ids"], tokenizer("Tom has 4 apples and buys 7 more.")["input_ids"]]
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=0.95, top_k=0, max_new_tokens=8,
                              min_new_tokens=8, num_return_sequences=3, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(1)
    rows = generate_from_ids(model, prompts, tokenizer.pad_token_id, generation_config=config)
    torch.manual_seed(1)
    again = generate_from_ids(model, prompts, tokenizer.pad_token_id, generation_config=config)
    assert rows == again and len(rows) == 6 and all(len(r) == 8 for r in rows)
    assert len({tuple(r) for r in rows}) > 2  # sampled, not one sequence six times
    # top-k 1 samples the greedy sequence: each prompt's three rows are its own greedy continuation, in order
    config.top_k = 1
    rows = generate_from_ids(model, prompts, tokenizer.pad_token_id, generation_config=config)
    greedy = [generate_from_ids(model, [p], tokenizer.pad_token_id, max_new_tokens=8, min_new_tokens=8,
                                do_sample=False)[0] for p in prompts]
    assert greedy[0] != greedy[1]
    assert rows == [greedy[0]] * 3 + [greedy[1]] * 3


def test_a_prompt_repeated_is_prefilled_once_with_the_same_continuations(tiny_policy, monkeypatch):
    """Rows of one prompt share its prefill (runtime/generation.py `shared_prompt_cache`): top-k 1 continues each
    row exactly as `generate`'s own prefill does, and sampling draws the same tokens from the same seed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import coreward.runtime.generation as generation

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy)
    prompts = [tokenizer("What is 2 + 3?")["input_ids"], tokenizer("Tom has 4 apples and buys 7 more.")["input_ids"]]
    prefills = []
    shared = generation.shared_prompt_cache
    monkeypatch.setattr(generation, "shared_prompt_cache",
                        lambda model, ids, mask: prefills.append(ids.shape) or shared(model, ids, mask))
    outputs = {}
    for name, share in (("shared", True), ("generate's", False)):
        if not share:
            monkeypatch.setattr(generation, "shared_prompt_cache", lambda *args: None)
        for top_k in (1, 0):
            config = GenerationConfig(do_sample=True, temperature=1.0, top_k=top_k, max_new_tokens=6,
                                      min_new_tokens=6, pad_token_id=tokenizer.pad_token_id,
                                      eos_token_id=tokenizer.eos_token_id)
            torch.manual_seed(3)
            outputs[name, top_k] = generate_from_ids(model, prompts, tokenizer.pad_token_id, repeat=4,
                                                     generation_config=config)
    assert prefills == [(8, max(len(p) for p in prompts))] * 2  # 8 rows, 2 distinct prompts: the shared path ran
    assert outputs["shared", 1] == outputs["generate's", 1]
    assert outputs["shared", 0] == outputs["generate's", 0] and len({tuple(r) for r in outputs["shared", 0]}) > 2
