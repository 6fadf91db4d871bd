"""The memory plan's activation term (runtime/memory.py `activation_bytes`) against what a real forward keeps for
its backward, counted with `torch.autograd.graph.saved_tensors_hooks` on a small random Qwen2 (2 layers): the
policy's pass through TRL's fused log-probability head and the reward model's through its score head, float32,
float32 weights under bf16 autocast and bf16 weights, gradient checkpointing off and on; and `parameter_count` against the built
models (Qwen2, Qwen3, Llama; tied and untied). benchmarks/memory/memory_plan_accuracy.py does the same at the papers'
models' real widths."""

from __future__ import annotations

import contextlib

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, Qwen2Config

from coreward.runtime.memory import ModelShape, activation_bytes, parameter_count


CONFIG = {"model_type": "qwen2", "vocab_size": 2048, "hidden_size": 384, "intermediate_size": 1536,
          "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 64,
          "tie_word_embeddings": True}
ROWS, SEQ = 4, 128
TOLERANCE = 0.15
# float32 weights and compute; float32 weights under bf16 autocast (coreward's bf16 policy, float32 masters);
# bf16 weights (Cooper's RM with rm_dtype: bfloat16)
WEIGHTS = {"float32": torch.float32, "autocast": torch.float32, "bfloat16": torch.bfloat16}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The bytes do not depend on threads; on a shared 2-core host one thread runs these small matrices ~5x faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(head: str, layers: int, mode: str = "float32"):
    config = Qwen2Config(**{k: v for k, v in CONFIG.items() if k != "model_type"}, pad_token_id=0,
                         attn_implementation="sdpa")
    config.num_hidden_layers = layers
    torch.manual_seed(0)
    if head == "score":
        config.num_labels = 1
        return AutoModelForSequenceClassification.from_config(config).to(WEIGHTS[mode]).train()
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_config(config).to(WEIGHTS[mode]).train()
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # what TRL 1.16's GRPOTrainer does to its policy
    return model


def kept_bytes(model, head: str, mode: str, checkpointing: bool) -> int:
    """Bytes the forward keeps for the backward: every saved tensor's storage once, the parameters excluded (they
    are state), and under (non-reentrant) checkpointing the layers' inputs, which it keeps outside the hooks."""
    if checkpointing:  # non-reentrant, as TRL and transformers enable it
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def keep(tensor):
        address = tensor.untyped_storage().data_ptr()
        if address and address not in params:
            kept.setdefault(address, tensor.untyped_storage().nbytes())

    def pack(tensor):
        keep(tensor)
        return tensor

    def layer_inputs(module, args, kwargs):
        for value in (*args, *kwargs.values()):
            if torch.is_tensor(value):
                keep(value)

    hooks = [layer.register_forward_pre_hook(layer_inputs, with_kwargs=True) for layer in model.model.layers
             ] if checkpointing else []
    ids = torch.randint(1, CONFIG["vocab_size"], (ROWS, SEQ), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[-1, SEQ - SEQ // 8:] = 0  # a padded batch, as training's are: the attention mask is a real one
    ids[-1, SEQ - SEQ // 8:] = 0
    mixed = torch.autocast("cpu", dtype=torch.bfloat16) if mode == "autocast" else contextlib.nullcontext()
    with mixed, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        if head == "lm":
            labels = ids.clone()
            labels[:, : SEQ // 4] = -100
            loss = -model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs.mean()
        else:
            scores = model(input_ids=ids, attention_mask=mask).logits[:, 0].float()
            loss = -torch.nn.functional.logsigmoid(scores[: ROWS // 2] - scores[ROWS // 2:]).mean()
    loss.backward()  # the graph was whole: a pass that could not backpropagate would fail here
    for hook in hooks:
        hook.remove()
    return sum(kept.values())


def predicted(head: str, mode: str, checkpointing: bool) -> int:
    shape = ModelShape.from_config(CONFIG)
    return activation_bytes(shape, ROWS, SEQ, dtype="float32" if mode == "float32" else "bfloat16",
                            weights_dtype="bfloat16" if mode == "bfloat16" else "float32",
                            attn_implementation="sdpa", gradient_checkpointing=checkpointing, head=head)


@pytest.mark.parametrize("head", ["lm", "score"])
@pytest.mark.parametrize("mode", list(WEIGHTS))
def test_kept_activations_match_the_plan(head, mode):
    two, one = (kept_bytes(build(head, n, mode), head, mode, checkpointing=False) for n in (2, 1))
    assert two > one > 0
    assert predicted(head, mode, False) == pytest.approx(two, rel=TOLERANCE)
    # checkpointed: each layer keeps its input, and backward recomputes one layer at a time, which then holds what
    # that layer kept without checkpointing (measured: two layers' kept bytes less one layer's)
    checkpointed = kept_bytes(build(head, 2, mode), head, mode, checkpointing=True)
    assert checkpointed < one
    assert predicted(head, mode, True) == pytest.approx(checkpointed + (two - one), rel=TOLERANCE)


@pytest.mark.parametrize("model_type, extra", [("qwen2", {}), ("qwen3", {"head_dim": 32}),
                                               ("llama", {"head_dim": 16, "tie_word_embeddings": False})])
@pytest.mark.parametrize("head", ["lm", "score"])
def test_parameter_count_is_the_models(model_type, extra, head):
    from transformers import AutoConfig

    spec = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True, **extra}
    config = AutoConfig.for_model(model_type, pad_token_id=0, num_labels=1, **spec)
    factory = AutoModelForSequenceClassification if head == "score" else AutoModelForCausalLM
    model = factory.from_config(config)
    shape = ModelShape.from_config({"model_type": model_type, **spec})
    assert parameter_count(shape, head) == sum(p.numel() for p in model.parameters())
