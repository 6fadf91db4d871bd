"""The local Hugging Face text generator (`llm/hf_local.py`) on a tiny random model: order, seeds, faults, loading."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from coreward.llm import (
    GenerationRequest,
    HFLocalGenerator,
    build_generator,
)


FAST = {"backoff_s": 0.01, "timeout_s": 2.0, "max_retries": 4, "deadline_s": 20.0}

WORDS = "what is two plus three solve the problem answer it 0 1 2 3 4 5 6 7 8 9 + = ? . user assistant system :"


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer with a chat template (a stand-in for the project's demo tokenizer)."""
    vocab = {token: i for i, token in enumerate(["<pad>", "<eos>", "<unk>", *WORDS.split()])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    template = (
        "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant :{% endif %}"
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", chat_template=template
    )


def tiny_model(tokenizer: PreTrainedTokenizerFast) -> Qwen3ForCausalLM:
    """A 1-layer random Qwen3 (Qwen3 rather than Qwen2: AutoTokenizer would replace a qwen2 checkpoint's
    word-level tokenizer with a byte-level BPE one when the model is reloaded from disk)."""
    torch.manual_seed(0)
    ids = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=128,
        **ids,
    )
    model = Qwen3ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(**ids)
    return model


@pytest.fixture(scope="module")
def tiny():
    tokenizer = tiny_tokenizer()
    return tiny_model(tokenizer), tokenizer


QUESTIONS = ["what is two plus three ?", "solve 1 + 2 = ?", "what is 7 ?", "answer it .", "solve the problem ."]


def test_hf_batched_generation_is_ordered_and_seeded(tiny):
    model, tokenizer = tiny
    requests = [GenerationRequest.user(q, temperature=1.0, max_tokens=8, seed=i) for i, q in enumerate(QUESTIONS)]
    rng_before = torch.get_rng_state()
    batched = HFLocalGenerator(model, tokenizer, batch_size=2).generate(requests)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's random stream is untouched
    # a random model may end at once: that item is an "empty completion" failure, the others are text
    assert len(batched) == len(QUESTIONS) and sum(r.ok for r in batched) >= 3
    assert all(r.ok or r.error == "empty completion" for r in batched)
    assert all(len(tokenizer(r.text, add_special_tokens=False).input_ids) <= 8 for r in batched if r.ok)
    outcomes = [(r.text, r.error) for r in batched]
    again = HFLocalGenerator(model, tokenizer, batch_size=2).generate(requests)
    one_by_one = HFLocalGenerator(model, tokenizer, batch_size=1).generate(requests)
    assert [(r.text, r.error) for r in again] == outcomes
    assert [(r.text, r.error) for r in one_by_one] == outcomes  # a seeded item doesn't depend on its neighbours
    reseeded = HFLocalGenerator(model, tokenizer, batch_size=2).generate(
        [GenerationRequest.user(q, temperature=1.0, max_tokens=8, seed=100 + i) for i, q in enumerate(QUESTIONS)]
    )
    assert [(r.text, r.error) for r in reseeded] != outcomes


def test_hf_greedy_top_p_and_plain_prompts(tiny):
    model, tokenizer = tiny
    greedy = [GenerationRequest.user(q, temperature=0.0, max_tokens=6) for q in QUESTIONS[:3]]
    generator = HFLocalGenerator(model, tokenizer, batch_size=3)
    assert generator.use_chat_template
    assert [r.text for r in generator.generate(greedy)] == [r.text for r in generator.generate(greedy)]
    # top_p this small keeps only the most likely token: sampling becomes greedy
    narrow = [GenerationRequest.user(q, temperature=1.0, top_p=1e-6, max_tokens=6) for q in QUESTIONS[:3]]
    assert [r.text for r in generator.generate(narrow)] == [r.text for r in generator.generate(greedy)]
    plain = HFLocalGenerator(model, tokenizer, chat_template=False)
    assert not plain.use_chat_template
    assert (
        plain._prompt([{"role": "system", "content": "solve"}, {"role": "user", "content": "1 + 2"}]) == "solve\n1 + 2"
    )
    assert all(r.ok for r in plain.generate(greedy))


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9), (1.3, 0.5)])
def test_each_rows_tokens_follow_its_own_warped_distribution(temperature, top_p):
    """The row sampler draws each sampled row from softmax(logits / T) cut to its top-p nucleus (frequencies within
    4 standard errors over 20,000 draws), a greedy row beside it takes its argmax, and no token outside the
    nucleus is ever drawn."""
    from coreward.llm.hf_local import _RowSampler

    torch.manual_seed(1)
    logits = torch.randn(2, 12) * 2
    draws = 20_000
    sampled = GenerationRequest.user("x", temperature=temperature, top_p=top_p, seed=3)
    sampler = _RowSampler([sampled, GenerationRequest.user("y", temperature=0.0)], torch.device("cpu"))
    counts = torch.zeros(12)
    for _ in range(draws):
        one_hot = sampler(None, logits)
        assert one_hot[1].argmax() == logits[1].argmax()
        counts[one_hot[0].argmax()] += 1
    probs = torch.softmax(logits[0] / temperature, dim=-1)
    ranked, order = probs.sort(descending=True)
    nucleus = order[ranked.cumsum(0) - ranked < top_p]
    expected = torch.zeros(12)
    expected[nucleus] = probs[nucleus] / probs[nucleus].sum()
    outside = torch.ones(12, dtype=torch.bool)
    outside[nucleus] = False
    assert counts[outside].sum() == 0
    share = counts / draws
    se = (expected * (1 - expected) / draws).sqrt()
    assert ((share - expected).abs() <= 4 * se + 1e-9).all(), (share, expected)


def test_hf_batch_fault_fails_its_items_only(tiny, monkeypatch):
    model, tokenizer = tiny
    generator = HFLocalGenerator(model, tokenizer, batch_size=2)
    import coreward.llm.hf_local as hf_local

    real_generate, calls = hf_local.sampled_generate, []

    def out_of_memory_on_second_batch(*args, **kwargs):  # a batch's one generation call
        calls.append(1)
        if len(calls) == 2:
            raise torch.OutOfMemoryError("injected")
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(hf_local, "sampled_generate", out_of_memory_on_second_batch)
    results = generator.generate([GenerationRequest.user(q, temperature=0.0, max_tokens=4) for q in QUESTIONS])
    assert [r.ok for r in results] == [True, True, False, False, True]
    assert results[2].error == "OutOfMemoryError: injected"
    assert generator.stats["failures"] == 2 and generator.stats["requests"] == 5


def test_hf_loads_a_saved_model_through_the_factory(tiny, tmp_path):
    model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    requests = [GenerationRequest.user(q, temperature=0.0, max_tokens=5) for q in QUESTIONS[:2]]
    expected = [r.text for r in HFLocalGenerator(model, tokenizer).generate(requests)]
    for spec in (str(tmp_path), {"backend": "hf", "model_name_or_path": str(tmp_path), "device": "cpu"}):
        with build_generator(spec) as generator:
            assert isinstance(generator, HFLocalGenerator)
            assert [r.text for r in generator.generate(requests)] == expected
