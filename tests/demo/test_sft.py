"""Demo model and SFT warm start: Auto-class round trips, the shipped checkpoint, a tiny SFT run."""

import json
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from coreward.data.synthetic import load_demo
from coreward.demo import policy as demo_policy
from coreward.demo.model import build_demo_model, build_demo_tokenizer
from coreward.demo.sft import DemoSFTConfig, sft_main
from coreward.runtime.config import to_dict
from coreward.runtime.errors import CorewardError


REPO = Path(__file__).resolve().parents[2]
TINY = [
    "hidden=32", "layers=1", "heads=2", "kv_heads=1", "intermediate=64", "train_size=256", "max_steps=8",
    "batch_size=16", "learning_rate=1e-2", "warmup_steps=0", "logging_steps=1", "eval_size=8", "eval_samples=1",
    "max_new_tokens=8",
]


def test_model_and_tokenizer_round_trip_through_auto_classes(tmp_path):
    tokenizer = build_demo_tokenizer()
    model = build_demo_model(tokenizer, seed=0)
    assert 300_000 < model.num_parameters() < 1_200_000
    assert model.config.tie_word_embeddings
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    text = load_demo("test", 1)[0].question + "12+5=17;\\boxed{17}"
    ids = loaded_tokenizer(text, return_tensors="pt")["input_ids"]
    assert ids.tolist() == tokenizer(text, return_tensors="pt")["input_ids"].tolist()
    assert loaded_tokenizer.decode(ids[0]) == text and loaded_tokenizer.padding_side == "left"
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    for config in (loaded.config, loaded.generation_config):
        assert config.eos_token_id == tokenizer.eos_token_id and config.pad_token_id == tokenizer.pad_token_id


def test_shipped_checkpoint_loads_and_generates():
    path = demo_policy.ensure_demo_policy()
    assert path == demo_policy.SHIPPED
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    questions = [r.question for r in load_demo("test", 2)]
    batch = tokenizer(questions, return_tensors="pt", padding=True)
    output = model.generate(**batch, max_new_tokens=32, do_sample=False)
    completions = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert all(c and "<unk>" not in c and "=" in c for c in completions)
    metrics = json.loads((path / "sft_metrics.json").read_text())
    assert 0.2 <= metrics["sampled_t1"]["verified"] <= 0.6


def test_yaml_mirrors_the_dataclass_defaults():
    """ensure_demo_policy() builds from the defaults: configs/demo/sft.yaml must describe the same recipe."""
    assert yaml.safe_load((REPO / "configs/demo/sft.yaml").read_text()) == to_dict(DemoSFTConfig())


def test_config_rejects_unknown_answer_format():
    with pytest.raises(CorewardError, match="answer_formats"):
        sft_main(None, ["answer_formats={latex: 1.0}"], "unused")


def test_tiny_sft_run_writes_a_loadable_checkpoint_and_lowers_the_loss(tmp_path):
    out = sft_main(None, TINY, str(tmp_path / "sft"))
    metrics = json.loads((out / "sft_metrics.json").read_text())
    assert metrics["steps"] == 8 and metrics["losses"][-1] < metrics["losses"][0]
    assert set(metrics["greedy"]) == {"verified", "true", "answer_formats"} and "sampled_t1" in metrics
    assert demo_policy.is_loadable(out)


def test_missing_shipped_checkpoint_is_built_once_into_the_cache(tmp_path, monkeypatch):
    calls = []

    def fake_sft_main(config_path, overrides, output_dir):
        calls.append(output_dir)
        return sft_main(None, TINY[:5] + ["max_steps=1", "train_size=16", "eval_size=1", "eval_samples=1"], output_dir)

    monkeypatch.setattr(demo_policy, "SHIPPED", tmp_path / "absent")
    monkeypatch.setenv("COREWARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("coreward.demo.sft.sft_main", fake_sft_main)
    first = demo_policy.ensure_demo_policy()
    assert first == tmp_path / "cache" / f"demo_policy-{demo_policy.recipe_hash()}"
    assert demo_policy.ensure_demo_policy() == first and len(calls) == 1
    assert demo_policy.is_loadable(first)
