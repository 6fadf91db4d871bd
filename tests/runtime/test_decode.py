"""The decoding loop of sampled generation (runtime/generation.py `decode`, `reserved_cache`): the tokens and
log-probabilities `generate` gives from the same seed, every row ended, padded or stopped as `generate` does it,
and a cache that grows in place."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, StoppingCriteria, StoppingCriteriaList

import coreward.runtime.generation as generation
from coreward.runtime.generation import generate_from_ids
from coreward.runtime.sampling import sample_token_ids


pytestmark = pytest.mark.usefixtures("one_torch_thread")

QUESTIONS = ["What is 2 + 3?", "Tom has 4 apples and buys 7 more.", "9 - 4 ="]


def loaded(path, dtype=torch.float32):
    tokenizer = AutoTokenizer.from_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval(), tokenizer


def both_ways(monkeypatch, run):
    """`run()` through `decode` and through transformers' `generate` (the loop turned off), from one seed, and how
    many times `decode` ran."""
    calls = []
    own = generation.decode
    with monkeypatch.context() as patched:
        patched.setattr(generation, "decode", lambda *a, **k: calls.append(1) or own(*a, **k))
        torch.manual_seed(5)
        ours = run()
        patched.setattr(generation, "decodes_as_generate", lambda *args: False)
        torch.manual_seed(5)
        theirs = run()
    return ours, theirs, len(calls)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("repeat", [4, 1])  # 4: the prompts' prefix comes from the shared prefill; 1: prefilled here
def test_decode_samples_the_tokens_generate_samples(tiny_policy, monkeypatch, dtype, repeat):
    model, tokenizer = loaded(tiny_policy, dtype)
    prompts = [tokenizer(q)["input_ids"] for q in QUESTIONS]  # three lengths: left padding in every batch
    config = GenerationConfig(do_sample=True, temperature=0.9, top_p=0.95, top_k=0, max_new_tokens=12,
                              min_new_tokens=3, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    ours, theirs, ran = both_ways(monkeypatch, lambda: generate_from_ids(model, prompts, tokenizer.pad_token_id,
                                                                         repeat=repeat, generation_config=config))
    assert ran == 1 and ours == theirs
    assert len(ours) == 3 * repeat and len({tuple(row) for row in ours}) > 2  # sampled, not one row repeated


def test_rows_end_and_are_padded_as_generate_ends_them(tiny_policy, monkeypatch):
    """End tokens chosen so that some rows end early: each is padded after its end, the others run on, and the loop
    stops at the budget; with every row ended it stops early."""
    model, tokenizer = loaded(tiny_policy)
    prompts = [tokenizer(q)["input_ids"] for q in QUESTIONS]
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=4, max_new_tokens=10,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(5)
    free = generate_from_ids(model, prompts, tokenizer.pad_token_id, repeat=4, generation_config=config)
    # the third token of half the rows ends a row from now on (the rows before it are the same: same seed)
    config.eos_token_id = sorted({row[2] for row in free[::2]} - {row[2] for row in free[1::2]})
    assert config.eos_token_id, "no token that only some rows draw third; choose another seed"
    ours, theirs, ran = both_ways(monkeypatch, lambda: generate_from_ids(model, prompts, tokenizer.pad_token_id,
                                                                         repeat=4, generation_config=config))
    assert ran == 1 and ours == theirs
    ended = [next((k for k, t in enumerate(row) if t in config.eos_token_id), None) for row in ours]
    assert any(k is not None and k < 9 for k in ended) and any(k is None for k in ended)
    for row, k in zip(ours, ended):
        if k is not None:
            assert set(row[k + 1:]) <= {tokenizer.pad_token_id}
    config.eos_token_id = sorted({row[0] for row in free})  # every row ends at its first token
    ours, theirs, _ = both_ways(monkeypatch, lambda: generate_from_ids(model, prompts, tokenizer.pad_token_id,
                                                                       repeat=4, generation_config=config))
    assert ours == theirs and all(len(row) == 1 for row in ours)


def test_the_recorded_log_probabilities_and_stopping_criteria_are_generates(tiny_policy, monkeypatch):
    """The sampler's log-probabilities (a logits processor before the sampler) and a stopping criterion see what
    they see under `generate`: the same values, the same number of calls, the same sequences."""
    model, tokenizer = loaded(tiny_policy)
    prompts = [tokenizer(q)["input_ids"] for q in QUESTIONS for _ in range(3)]
    config = GenerationConfig(do_sample=True, temperature=0.7, top_k=0, max_new_tokens=9,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    ours, theirs, ran = both_ways(monkeypatch, lambda: sample_token_ids(
        model, prompts, config, tokenizer.pad_token_id, [tokenizer.eos_token_id], 0.7))
    assert ran == 1 and ours[0] == theirs[0]
    assert all(torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-6) for a, b in zip(ours[1], theirs[1]))

    class StopAtSix(StoppingCriteria):  # row 0 stops after six new tokens; every call's arguments recorded
        def __init__(self):
            self.seen = []

        def __call__(self, input_ids, scores, **kwargs):
            self.seen.append((input_ids.clone(), scores))
            done = torch.zeros(input_ids.size(0), dtype=torch.bool)
            done[0] = input_ids.size(1) - width >= 6
            return done

    width = max(len(p) for p in prompts)
    stops = {}

    def run():
        stop = StopAtSix()
        stops[len(stops)] = stop
        return generate_from_ids(model, prompts, tokenizer.pad_token_id, generation_config=config,
                                 stopping_criteria=StoppingCriteriaList([stop]))

    ours, theirs, ran = both_ways(monkeypatch, run)
    assert ran == 1 and ours == theirs
    assert len(stops[0].seen) == len(stops[1].seen)
    assert all(torch.equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(stops[0].seen, stops[1].seen))
    assert set(ours[0][6:]) <= {tokenizer.pad_token_id}


def test_the_cache_grows_in_place_and_settings_decode_does_not_apply_go_to_generate(tiny_policy, monkeypatch):
    """Each layer's keys are written into one buffer, never concatenated again; a setting the loop does not apply
    (a repetition penalty) leaves the decoding to `generate`, with the same cache."""
    model, tokenizer = loaded(tiny_policy)
    prompts = [tokenizer(q)["input_ids"] for q in QUESTIONS]
    made = []
    reserved = generation.reserved_cache
    monkeypatch.setattr(generation, "reserved_cache", lambda *a: made.append(reserved(*a)) or made[-1])
    pointers = []
    layer = type(reserved(model, 1).layers[0])
    update = layer.update
    monkeypatch.setattr(layer, "update", lambda self, *a, **k: pointers.append(id(self)) or update(self, *a, **k))
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, max_new_tokens=8, min_new_tokens=8,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    generate_from_ids(model, prompts, tokenizer.pad_token_id, repeat=2, generation_config=config)
    cache = made[-1]
    width = max(len(p) for p in prompts)
    assert cache.get_seq_length() == width + 7  # the prompt and every new token but the last, which is not run
    for item in cache.layers:
        keys, _ = item.buffers
        assert item.keys.data_ptr() == keys.data_ptr() and keys.shape[-2] >= width + 7
    assert len(pointers) == 8 * len(cache.layers)  # one update a layer a step, all into the reserved layers
    called = []
    monkeypatch.setattr(generation, "decode", lambda *a, **k: called.append(1))
    config.repetition_penalty = 1.3
    rows = generate_from_ids(model, prompts, tokenizer.pad_token_id, generation_config=config)
    assert not called and len(rows) == 3 and all(len(row) == 8 for row in rows)
    assert isinstance(made[-1].layers[0], layer) and made[-1].get_seq_length() == width + 7


def test_greedy_decoding_and_a_local_generator_take_the_same_loop(tiny_policy, monkeypatch):
    """Greedy decoding (an evaluation at temperature 0: sampling settings set, never applied) and a local text
    generator (llm/hf_local.py: greedy over its per-request sampler's one-hot choice) decode in the loop, with the
    tokens and texts `generate` gives."""
    from coreward.llm.base import GenerationRequest
    from coreward.llm.hf_local import HFLocalGenerator

    model, tokenizer = loaded(tiny_policy)
    prompts = [tokenizer(q)["input_ids"] for q in QUESTIONS]
    config = GenerationConfig(do_sample=False, temperature=1.0, top_p=1.0, top_k=0, repetition_penalty=1.0,
                              max_new_tokens=10, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=[tokenizer.eos_token_id], use_cache=True)
    ours, theirs, ran = both_ways(monkeypatch, lambda: generate_from_ids(model, prompts, tokenizer.pad_token_id,
                                                                         generation_config=config))
    assert ran == 1 and ours == theirs and len({tuple(row) for row in ours}) == 3
    generator = HFLocalGenerator(str(tiny_policy), batch_size=8, dtype="float32")
    # as a generation config made from a model's config has them (a real checkpoint's): outputs asked off
    generator.model.generation_config.update(output_attentions=False, output_hidden_states=False)
    requests = [GenerationRequest(messages=[{"role": "user", "content": q}], max_tokens=12, temperature=0.8,
                                  top_p=0.95, seed=index) for index, q in enumerate(QUESTIONS * 2)]
    ours, theirs, ran = both_ways(monkeypatch, lambda: [r.text for r in generator.generate(requests)])
    assert ran == 1 and ours == theirs and len(set(ours)) > 3


def test_a_sharded_model_decodes_with_every_rank_stepping_until_all_have_ended(tiny_policy, tmp_path):
    """Under FSDP2 (torchrun, 2 gloo processes) rank 0's rows end at their first token and rank 1's run to the
    budget: generation returns on both ranks (each forward gathers weights from both), greedy and sampled."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from coreward.experiments.jobs import free_port

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{repo / 'src'}{os.pathsep}{repo}", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), str(repo / "tests" / "helpers" / "sharded_decode_worker.py"), str(tiny_policy),
               str(tmp_path)]
    launched = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    try:
        _, errors = launched.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(launched.pid, signal.SIGKILL)  # torchrun and both workers
        _, errors = launched.communicate()
        raise AssertionError(f"a rank waited for the other: {errors[-2000:]}") from None
    assert launched.returncode == 0, errors[-3000:]
    for mode in ("greedy", "sampled"):
        assert json.loads((tmp_path / f"rank0-{mode}.json").read_text()) == [1] * 4
        assert json.loads((tmp_path / f"rank1-{mode}.json").read_text()) == [12] * 4
