"""`coreward rm train` in bf16 learns as in float32: float32 weights that AdamW steps, bf16 compute through Trainer's
autocast (runtime/precision.py). Measured by how far training moves the weights, ‖θ_final − θ_init‖: a bf16 run
moves them about as far as a float32 one; bf16 weights stepped in place (`master_weights: none`) at a learning
rate under half a bf16 step mostly do not move, and the run says so."""

from __future__ import annotations

import torch
from safetensors.torch import load_file
from transformers import Qwen3Config, Qwen3ForCausalLM, set_seed

from coreward.demo.model import build_demo_tokenizer
from coreward.rm.train import RMTrainConfig, build_rm, train_rm
from coreward.runtime.precision import update_norm
from tests.rm.test_model import rows_for, write_jsonl


LR = 1e-5  # Cooper's RM learning rate: below half a bf16 step (~6e-5 at |w| ≈ 0.02) for most weights


def backbone(path):
    tokenizer = build_demo_tokenizer()
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    Qwen3ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def moved(tmp_path, model_path, data, name: str, **model_settings) -> tuple[float, float, torch.dtype]:
    """‖θ_final − θ_init‖ of one `rm train` run (float64 sums), the share of the weights that changed, and the
    dtype `final/` holds."""
    config = RMTrainConfig()
    config.model.backbone, config.model.add_template_tokens = str(model_path), True
    for key, value in model_settings.items():
        setattr(config.model, key, value)
    config.data.train, config.data.eval_fraction = data, 0.0
    config.training = {"learning_rate": LR, "num_train_epochs": 1, "per_device_train_batch_size": 8,
                       "lr_scheduler_type": "constant", "logging_steps": 100, "save_strategy": "no"}
    config.output_dir = str(tmp_path / name)
    set_seed(config.seed)  # as train_rm does before it builds the RM: the same initial head
    before = {k: v.detach().clone() for k, v in build_rm(config.model).model.state_dict().items()}
    train_rm(config)
    after = load_file(str(tmp_path / name / "final" / "model.safetensors"))
    dtype = after["score.weight"].dtype
    changed = sum(int((after[k] != before[k].to(dtype)).sum()) for k in after)
    return update_norm(before, after), changed / sum(t.numel() for t in after.values()), dtype


def test_bf16_rm_train_learns_like_float32(tmp_path, capsys):
    model_path = backbone(tmp_path / "backbone")
    data = write_jsonl(tmp_path / "train.jsonl", rows_for(24))  # 48 rows: 6 AdamW steps
    fp32, fp32_changed, fp32_dtype = moved(tmp_path, model_path, data, "fp32")
    bf16, bf16_changed, bf16_dtype = moved(tmp_path, model_path, data, "bf16", dtype="bfloat16")
    printed = capsys.readouterr().out
    assert "rm train: precision: weights float32 (AdamW steps them), compute bfloat16" in printed
    assert fp32_dtype == bf16_dtype == torch.float32  # AdamW stepped float32 weights, and final/ holds them
    assert 0.7 < bf16 / fp32 < 1.4, (bf16, fp32)  # the same optimizer on the same data: about as far
    assert fp32_changed > 0.8 and bf16_changed > 0.8, (fp32_changed, bf16_changed)  # all but unused embedding rows
    _, in_place_changed, in_place_dtype = moved(tmp_path, model_path, data, "in_place", dtype="bfloat16",
                                                master_weights="none")
    assert in_place_dtype == torch.bfloat16
    assert in_place_changed < 0.5, in_place_changed  # most of its steps rounded away
    assert "warning: the RM is updated in bfloat16 with no float32 master weights" in capsys.readouterr().out
