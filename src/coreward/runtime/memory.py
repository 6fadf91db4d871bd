"""Model-shape arithmetic for the memory plan (`coreward plan`, grpo/plan/): parameter counts and the bytes a
forward pass with gradients keeps for its backward, from a model's config.json alone (no weights, no torch).

The activation model counts the tensors a decoder layer saves for backward, per token, as multiples of the layer's
widths (hidden h, intermediate I, the query width q = heads × head_dim and the key/value width kv = KV heads ×
head_dim), for a Llama/Qwen2-style layer (RMSNorm, GQA attention with RoPE, SwiGLU MLP) and a Qwen3 layer (the
same with RMSNorms on q and k). In bf16 (e = 2 bytes an element), counted with `saved_tensors_hooks` on this CPU:

    MLP            gate and up outputs, silu(gate), their product:                   4 tensors × I × e   =  8 I
    RMSNorms (2)   each keeps its float32 input copy (4 h), the normed value and its output (e h each): 16 h
    attention      q after RoPE and the attention output (q each), k and v (kv each): 4 q + 4 kv
    SDPA's mask    a padded batch's attention mask in the compute dtype:            e × seq_len (+ 2 h)
                   and, with it, k and v expanded to every query head (repeat_kv):  8 q in place of 4 q + 4 kv
    eager attention  the score matrix (e) and its float32 softmax, per head:        (e + 4) × heads × seq_len
                                                                            (4 × heads × seq_len in float32)
    Qwen3          the q/k RMSNorms:                                                 6 q + 6 kv

Flash-attention (GPU) and SDPA (CPU's flash kernel, GPU's flash/memory-efficient kernels) keep q, k, v, the
output and the log-sum-exp only: no seq_len² term. Float32 weights and compute double every element (and the
norms keep their inputs rather than copies); float32 weights under bf16 autocast ("mixed") keep the bf16 layer
plus float32 residuals (~10 h) and, until backward, the bf16 copies of the weights autocast made. With gradient
checkpointing a layer keeps its input only (e h; float32 under autocast), and backward recomputes one layer at a
time (one layer's full activations at once).

Measured accuracy and the calibration against allocation peaks: docs/explanation/memory-model.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from coreward.runtime.errors import CorewardError


GIB = 1024**3
MIB = 1024**2
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# the model configs of the papers' models, shipped so that their plans work offline: <org>--<name>/config.json
MODEL_CONFIGS_DIR = Path(__file__).resolve().parents[1] / "assets" / "model_configs"


@dataclass(frozen=True)
class ModelShape:
    """The widths of a decoder-only transformer that memory depends on (a config.json's fields)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool
    model_type: str = "qwen2"
    attention_bias: bool = True  # q, k, v biases (Qwen2's)
    max_position_embeddings: int = 1 << 20  # no sequence is longer

    @property
    def family(self) -> str:
        """"qwen3" (RMSNorms on q and k) or "llama" (Llama, Qwen2, Mistral: the same layer otherwise)."""
        return "qwen3" if self.model_type.startswith("qwen3") else "llama"

    @property
    def q_width(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """From a config.json's mapping (a multimodal config's text_config when it has one)."""
        config = config.get("text_config") or config
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        model_type = str(config.get("model_type", "qwen2"))
        return cls(
            vocab_size=int(config["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(config["intermediate_size"]),
            num_hidden_layers=int(config["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            model_type=model_type,
            attention_bias=bool(config.get("attention_bias", model_type == "qwen2")),
            max_position_embeddings=int(config.get("max_position_embeddings") or 1 << 20),
        )

    @classmethod
    def from_path(cls, name_or_path: str | os.PathLike, kind: str = "policy", key: str = "model") -> ModelShape:
        """From `config_path(name_or_path)`'s config.json; one that is not a decoder's config (a field missing, not a
        number, not JSON) is a one-line error naming `key`, the file and the field."""
        path = config_path(name_or_path, kind, key)
        try:
            return cls.from_config(json.loads(path.read_text()))
        except KeyError as err:
            raise CorewardError(f"{key}: {path} has no {err.args[0]!r}: the memory plan needs a decoder's widths "
                                "(vocab_size, hidden_size, intermediate_size, num_hidden_layers, "
                                "num_attention_heads)") from None
        except (ValueError, TypeError, AttributeError, ZeroDivisionError) as err:  # JSONDecodeError is a ValueError
            raise CorewardError(f"{key}: {path} is not a decoder's config.json the memory plan can read "
                                f"({err})") from None


def config_path(name_or_path: str | os.PathLike, kind: str = "policy", key: str = "model") -> Path:
    """The config.json of a model, found without a download: a directory holding one (weights are not needed), a
    shipped asset name (`demo`: `kind` says which), a real model's registered name or a GGUF file
    (runtime/real_models.py), a model whose config ships with coreward
    (assets/model_configs/<org>--<name>/), or a hub id in the local Hugging Face cache. Else a one-line error
    naming `key`."""
    name = str(name_or_path)
    directory = Path(name).expanduser()
    if (directory / "config.json").is_file():
        return directory / "config.json"
    from coreward.runtime.assets import SHIPPED, shipped_path
    from coreward.runtime.real_models import is_real_model, real_model_path

    if kind == "policy" and is_real_model(name):  # smollm2-135m-instruct, a .gguf file: the folder it converts to
        return Path(real_model_path(name, key)) / "config.json"
    if name in SHIPPED and kind in SHIPPED[name]:
        return shipped_path(name, kind) / "config.json"
    shipped = MODEL_CONFIGS_DIR / name.replace("/", "--") / "config.json"
    if "/" in name and shipped.is_file():
        return shipped
    if "/" in name and not directory.exists():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, "config.json")
        except Exception:  # not a valid repo id: the error below
            cached = None
        if isinstance(cached, str):
            return Path(cached)
    if "/" not in name and kind == "policy":  # a mistyped registered name, before the hub's advice
        from coreward.runtime.assets import registered_names
        from coreward.runtime.names import nearest

        if (close := nearest(name, registered_names(kind))) is not None:
            raise CorewardError(f"{key}: {name!r} is not a registered {kind} name; did you mean {close!r}?")
    raise CorewardError(f"{key}: no config.json for {name!r} here (not a directory holding one, not one of the "
                        "model configs coreward ships, not in the Hugging Face cache): give a directory with the "
                        "model's config.json (the weights are not needed to plan)")


def shipped_model_configs() -> list[str]:
    """The hub ids whose config.json ships with coreward."""
    return sorted(p.parent.name.replace("--", "/", 1) for p in MODEL_CONFIGS_DIR.glob("*/config.json"))


def layer_parameter_count(shape: ModelShape) -> int:
    """Parameters of one decoder layer."""
    h, q, kv, inter = shape.hidden_size, shape.q_width, shape.kv_width, shape.intermediate_size
    attention = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if shape.attention_bias else 0)
    norms = 2 * h + (2 * shape.head_dim if shape.family == "qwen3" else 0)
    return attention + 3 * h * inter + norms


def parameter_count(shape: ModelShape, head: Literal["lm", "score"]) -> int:
    """All parameters: embeddings, layers, the final norm, and the head (a language model's output projection,
    none when tied to the embeddings; a reward model's one-logit `score` projection)."""
    embeddings = shape.vocab_size * shape.hidden_size
    if head == "lm":
        head_params = 0 if shape.tie_word_embeddings else embeddings
    else:
        head_params = shape.hidden_size
    return embeddings + shape.num_hidden_layers * layer_parameter_count(shape) + shape.hidden_size + head_params


@dataclass(frozen=True)
class LayerBytes:
    """Bytes per token of one layer's kept activations, as multiples of its widths (see the module docstring):
    hidden·h + intermediate·I + q·q_width + kv·kv_width + seq·seq_len + head_seq·heads·seq_len."""

    hidden: float
    intermediate: float = 0.0
    q: float = 0.0
    kv: float = 0.0
    seq: float = 0.0
    head_seq: float = 0.0

    def per_token(self, shape: ModelShape, seq_len: int) -> float:
        return (self.hidden * shape.hidden_size + self.intermediate * shape.intermediate_size + self.q * shape.q_width
                + self.kv * shape.kv_width + self.seq * seq_len + self.head_seq * shape.num_attention_heads * seq_len)


def _layer(e: int, *, norms: float, qk_norm: bool, attn: str) -> LayerBytes:
    """A layer in compute dtype of `e` bytes (see the module docstring for each term)."""
    # eager attention's score matrix and its float32 softmax, per head (in float32 the softmax's output is the one kept)
    scores = (4 if e == 4 else e + 4) if attn == "eager" else 0.0
    mask = e if attn == "sdpa" else 0.0  # SDPA's additive mask for a padded batch (flash-attention takes lengths)
    # SDPA with a padded batch's mask (transformers' sdpa path) keeps k and v expanded to every query head (GQA's
    # repeat_kv): at q width, not kv width; flash-attention and eager's kv-width k and v
    expanded = attn == "sdpa"
    return LayerBytes(hidden=norms + (2 if attn == "sdpa" else 0), intermediate=4 * e,
                      q=(4 * e if expanded else 2 * e) + (3 * e if qk_norm else 0),
                      kv=(0 if expanded else 2 * e) + (3 * e if qk_norm else 0), seq=mask, head_seq=scores)


# (family, attention implementation, mode, gradient checkpointing) -> LayerBytes. mode: "bfloat16" (bf16 weights and
# compute), "float32", "mixed" (float32 weights, bf16 autocast). Checkpointed: the layer's input only (the one layer
# recomputed in backward is added by `activation_bytes`).
ACTIVATION_BYTES_PER_TOKEN_PER_LAYER: dict[tuple[str, str, str, bool], LayerBytes] = {}
for _family in ("llama", "qwen3"):
    for _attn in ("sdpa", "flash_attention_2", "eager"):
        _qk = _family == "qwen3"
        ACTIVATION_BYTES_PER_TOKEN_PER_LAYER[(_family, _attn, "bfloat16", False)] = _layer(2, norms=16, qk_norm=_qk, attn=_attn)
        ACTIVATION_BYTES_PER_TOKEN_PER_LAYER[(_family, _attn, "mixed", False)] = _layer(2, norms=26, qk_norm=_qk, attn=_attn)
        ACTIVATION_BYTES_PER_TOKEN_PER_LAYER[(_family, _attn, "float32", False)] = _layer(4, norms=24, qk_norm=_qk, attn=_attn)
        ACTIVATION_BYTES_PER_TOKEN_PER_LAYER[(_family, _attn, "bfloat16", True)] = LayerBytes(hidden=2)
        ACTIVATION_BYTES_PER_TOKEN_PER_LAYER[(_family, _attn, "mixed", True)] = LayerBytes(hidden=4)
        ACTIVATION_BYTES_PER_TOKEN_PER_LAYER[(_family, _attn, "float32", True)] = LayerBytes(hidden=4)

# Outside the layers: the final norm (and, for a language model, TRL's fused head's copy of its input), per token
_OUTSIDE_HIDDEN = {"bfloat16": 8, "mixed": 12, "float32": 12}

# Measured peak / formula, by mode: allocation peaks include what saved-tensor counts miss (autograd's views, the
# allocator's rounding). 1.0 until the measurements (docs/explanation/memory-model.md) say otherwise.
ACTIVATION_CALIBRATION = {"bfloat16": 1.0, "mixed": 1.0, "float32": 1.0}


def compute_mode(dtype: str, weights_dtype: str | None = None) -> str:
    """"bfloat16", "float32" or "mixed" (float32 weights computing in a 16-bit dtype under autocast)."""
    weights = weights_dtype or dtype
    if dtype not in DTYPE_BYTES or weights not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r} / {weights!r} (one of {', '.join(DTYPE_BYTES)})")
    if dtype == "float32":
        return "float32"
    return "mixed" if weights == "float32" else "bfloat16"


def attention_key(attn_implementation: str | None) -> str:
    """The table's attention implementation: flash-attention 2/3 and kernels alike are "flash_attention_2"."""
    attn = (attn_implementation or "sdpa").lower()
    if attn.startswith("flash") or "flash" in attn:
        return "flash_attention_2"
    return "eager" if attn == "eager" else "sdpa"


def layer_activation_bytes_per_token(shape: ModelShape, seq_len: int, *, dtype: str, attn_implementation: str | None,
                                     gradient_checkpointing: bool, weights_dtype: str | None = None) -> float:
    """One layer's kept activations per token (the table's entry for this shape)."""
    mode = compute_mode(dtype, weights_dtype)
    entry = ACTIVATION_BYTES_PER_TOKEN_PER_LAYER[(shape.family, attention_key(attn_implementation), mode,
                                                  gradient_checkpointing)]
    return entry.per_token(shape, seq_len) * (1.0 if gradient_checkpointing else ACTIVATION_CALIBRATION[mode])


def activation_bytes(shape: ModelShape, rows: int, seq_len: int, *, dtype: str, attn_implementation: str | None,
                     gradient_checkpointing: bool, head: Literal["lm", "score"], layers: int | None = None,
                     weights_dtype: str | None = None, tokens: int | None = None) -> int:
    """Bytes one forward pass with grad keeps for its backward, for `rows` sequences padded to `seq_len` tokens
    (`layers`: None for all of the shape's layers). `dtype` is the compute dtype; `weights_dtype` the weights'
    (None: the same); float32 weights computing in bf16 also keep autocast's bf16 copies of the weights until
    backward (of one layer at a time with gradient checkpointing). With checkpointing, each layer keeps its input
    and backward recomputes one layer's activations at a time. `tokens`: the tokens the pass runs when fewer than
    rows × seq_len (the last tokens of rows whose first ones are cached), each attending to `seq_len` positions."""
    layers = shape.num_hidden_layers if layers is None else layers
    tokens = rows * seq_len if tokens is None else tokens
    mode = compute_mode(dtype, weights_dtype)
    full = layer_activation_bytes_per_token(shape, seq_len, dtype=dtype, attn_implementation=attn_implementation,
                                            gradient_checkpointing=False, weights_dtype=weights_dtype)
    if gradient_checkpointing:
        kept = layer_activation_bytes_per_token(shape, seq_len, dtype=dtype, attn_implementation=attn_implementation,
                                                gradient_checkpointing=True, weights_dtype=weights_dtype)
        per_token = layers * kept + (full if layers else 0)
    else:
        per_token = layers * full
    head_input = 2 if mode == "bfloat16" else 4  # TRL's fused head keeps its input: the final norm's output
    outside = (_OUTSIDE_HIDDEN[mode] + (head_input if head == "lm" else 0)) * shape.hidden_size
    weight_copies = 0
    if mode == "mixed":  # autocast's bf16 copies of the layers' weights, kept for backward
        weight_copies = 2 * layer_parameter_count(shape) * (min(layers, 1) if gradient_checkpointing else layers)
    return int(tokens * (per_token + outside) + weight_copies)


def lm_head_tile_bytes(shape: ModelShape, tokens: int, *, dtype: str, on_gpu: bool, backward: bool,
                       weights_dtype: str = "float32", head_trained: bool = True) -> int:
    """The largest transient of TRL 1.16's fused log-probability head (trl/kernels/chunked_logprob.py): tiles of
    at most 4,096 tokens × 32,768 vocabulary entries in the compute dtype (on a CPU, without Triton, the torch fold
    adds ~3 float32 tiles); its backward also accumulates float32 gradients of its input (tokens × hidden) and of
    the head's weight (vocab × hidden): with float32 weights that tensor becomes the weight's gradient (counted with
    the gradients), with 16-bit weights it is a transient beside its cast copy. A frozen head (`head_trained` false:
    LoRA) gets no weight gradient at all: the kernel allocates it only `if needs_weight_grad`."""
    tile = min(tokens, 4096) * min(shape.vocab_size, 32768)
    transient = tile * (DTYPE_BYTES[dtype] + (0 if on_gpu else 3 * 4))
    if backward:
        transient += 4 * tokens * shape.hidden_size
        if head_trained and weights_dtype != "float32":
            transient += 4 * shape.vocab_size * shape.hidden_size
    return int(transient)


def kv_cache_bytes(shape: ModelShape, rows: int, seq_len: int, dtype: str) -> int:
    """A generation's key/value cache (transformers' generate, no vLLM): 2 × layers × kv width per token."""
    return 2 * shape.num_hidden_layers * shape.kv_width * rows * seq_len * DTYPE_BYTES[dtype]


def scoring_bytes(shape: ModelShape, rows: int, seq_len: int, dtype: str) -> int:
    """The largest transient of a no-grad forward (a reward model's scoring): one layer's working set at a time, the
    MLP's intermediate tensors (gate, up, their product) and a few hidden-wide ones."""
    e = DTYPE_BYTES[dtype]
    return int(rows * seq_len * e * (3 * shape.intermediate_size + 4 * shape.hidden_size + shape.q_width))


def parse_bytes(text: str) -> int:
    """"80GiB", "80 GB", "81920MiB", "8.5e10" -> bytes (GB and GiB both read as GiB: what a GPU's "80GB" means)."""
    units = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2, "mib": 1024**2,
             "g": GIB, "gb": GIB, "gib": GIB, "t": 1024**4, "tb": 1024**4, "tib": 1024**4}
    stripped = str(text).strip().lower().replace(" ", "")
    number = stripped.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = stripped[len(number):]
    try:
        return int(float(number) * units[unit])
    except (ValueError, KeyError, OverflowError):  # OverflowError: "1e400GiB"
        raise ValueError(f"not a memory size: {text!r} (e.g. 80GiB, 24GB, 81920MiB)") from None


def format_bytes(n: float) -> str:
    """Bytes as GiB with one decimal (MiB below 1 GiB)."""
    if abs(n) >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / 1024**2:.0f} MiB"


def activation_gradient_bytes(shape: ModelShape, tokens: int, compute_bytes: int, stream_bytes: int) -> int:
    """What backward allocates beyond the kept activations, one layer at a time: the gradients of the MLP's gate and
    up outputs (2 I in the compute dtype), of the attention output (q), and of the residual stream in and out
    (2 h in the stream's dtype: float32 under autocast over float32 weights)."""
    return tokens * (compute_bytes * (2 * shape.intermediate_size + shape.q_width) + 2 * stream_bytes * shape.hidden_size)
