"""The memory plan's activation and state terms beside what this CPU measures, at the papers' models' real widths
with few layers (random weights: nothing downloaded).

    python -m benchmarks.memory.memory_plan_accuracy [--quick] [--shapes qwen2.5-1.5b,...] [--raw] [--json FILE]

For each case (a shape × 1, 2 or 4 layers × policy or reward model × dtype × attention × gradient checkpointing)
it builds the model from its configuration (transformers' Qwen2/Qwen3/Llama classes), runs one update pass of
`--rows` × `--seq` tokens (a padded batch: the last row right-padded by an eighth, so the attention mask is a real
one, as in training) and prints predicted / measured with their ratio:

- kept: the bytes the forward keeps for the backward, counted exactly with `torch.autograd.graph.saved_tensors_hooks`
  (each saved tensor's storage once; the model's own parameters excluded: they are state), plus, under gradient
  checkpointing, the checkpointed layers' inputs (non-reentrant checkpointing keeps them outside the hooks).
  Predicted: `coreward.runtime.memory.activation_bytes`.
  With checkpointing, "measured" adds one layer's kept bytes without it (2 layers' less 1 layer's): the layer
  backward recomputes, which the planner's figure includes.
- peak: the process's resident peak over the forward and backward (VmHWM, reset before the pass) above the
  resident bytes before it, at the fewest layers, with the gradients the backward makes ("+ grads"), beside the
  planner's sum: activation bytes + `lm_head_tile_bytes` (policy) + those gradients' bytes. Where weights and
  gradients would not fit in --max-gib each gradient is dropped as soon as it is accumulated ("dropped"; the
  peak then still holds gradients waiting in autograd's buffers, and the sum has no gradient term).
  Informational: the planner sums terms that do not peak together (activations are freed as gradients appear),
  so its figure is an upper bound; not held to the tolerance.
- state (policy and reward model, float32 weights or bf16 weights with float32 masters; at the fewest layers,
  on a model of its own, where it fits in --max-gib): weights, gradients, AdamW moments and masters counted
  from the tensors after one optimizer step, and the process's resident bytes then (RssAnon above the baseline
  before the model), against `parameter_count` × the bytes per parameter grpo/plan/ counts for one process
  (float32: 4 weights + 4 gradients + 8 moments; bf16 with masters: 2 + 2 and 4 (the masters' float32
  gradients) + 4 masters + 8 moments). The step's peak beside plan.py's (the state plus AdamW's temporaries of
  the largest tensor on a CPU).

The policy's pass is TRL 1.16's GRPO path: the model patched with `trl.trainer.utils.add_fused_lm_head` (what
`GRPOTrainer` does), called with `fused_lm_head=True` so the full-vocabulary logits are never built (on a CPU
its torch tiles of 4,096 tokens × 32,768 vocabulary entries), and the clipped-ratio loss on the log-probabilities.
The reward model is `AutoModelForSequenceClassification` (num_labels=1) under the pairwise loss Cooper's RM uses
(the first half of the rows the positives, the second the negatives). Dtypes: `fp32` (float32 weights), `bf16`
(bf16 weights, as Cooper's `rm_dtype: bfloat16`), `autocast` (float32 weights under `torch.autocast("cpu",
bfloat16)`: coreward's bf16 policy with float32 masters).

Each group of cases runs in a process of its own with glibc's mmap threshold fixed at 64 KiB
(MALLOC_MMAP_THRESHOLD_), so a freed tensor leaves the resident set at once and the resident peaks measure live
tensor bytes rather than what the allocator keeps. Exit status 1 when a kept or state ratio lies outside ±15%
(`--tolerance`). `--raw` prints the measurements alone (no planner needed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from coreward.runtime.resident import reset_peak, resident, status


SHAPES = {  # the papers' models' configurations (their config.json), layers set per case
    "qwen2.5-1.5b": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "tie_word_embeddings": True,
                     "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "rope_theta": 1000000.0},
    "qwen3-4b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True,
                 "rms_norm_eps": 1e-6, "max_position_embeddings": 40960, "rope_theta": 1000000.0},
    "qwen3-8b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
                 "rms_norm_eps": 1e-6, "max_position_embeddings": 40960, "rope_theta": 1000000.0},
    "llama-3.2-1b": {"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "tie_word_embeddings": True,
                     "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "rope_theta": 500000.0},
}
DTYPES = ("fp32", "autocast", "bf16")
GIB = 1 << 30


# ----------------------------------------------------------------------------------------------- measuring (worker)

def build(shape: str, layers: int, head: str, dtype: str, attn: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    spec = dict(SHAPES[shape])
    config = AutoConfig.for_model(spec.pop("model_type"), num_hidden_layers=layers, pad_token_id=0,
                                  attn_implementation=attn, **spec)
    if head == "score":
        config.num_labels = 1
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    factory = AutoModelForSequenceClassification if head == "score" else AutoModelForCausalLM
    try:  # transformers' normal init is slow at these widths: skip it, then fill every weight (so it is resident)
        from transformers.initialization import no_init_weights
    except ImportError:
        import contextlib

        no_init_weights = contextlib.nullcontext
    with no_init_weights():
        model = factory.from_config(config, dtype=torch_dtype)
    model.tie_weights()  # skipped with the init: a tied head is the embedding again
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.uniform_(-0.02, 0.02, generator=generator)
    if head == "lm":
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # as GRPOTrainer (TRL 1.16) patches its policy
    model.train()
    return model


def set_checkpointing(model, on: bool) -> None:
    """Gradient (activation) checkpointing of every layer, non-reentrant: transformers' default, as TRL enables it."""
    new = hasattr(model, "activation_checkpointing_enable")  # transformers >= 5.23's name
    if on:
        model.activation_checkpointing_enable() if new else model.gradient_checkpointing_enable()
    else:
        model.activation_checkpointing_disable() if new else model.gradient_checkpointing_disable()


def update_loss(model, head: str, input_ids, attention_mask, prompt: int):
    """One update pass's loss: GRPO's clipped ratio on the completion's log-probabilities (TRL's fused head),
    or the pairwise loss of a reward model (positives the first half of the rows, negatives the second)."""
    import torch

    if head == "lm":
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        labels[:, :prompt] = -100  # only the completion is scored (logits_to_keep)
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
        logps = out.log_probs[:, prompt - 1:]
        advantages = torch.linspace(-1.0, 1.0, logps.shape[0]).unsqueeze(1)
        ratio = torch.exp(logps - logps.detach())
        return -(torch.minimum(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)).mean()
    scores = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0].float()
    half = scores.shape[0] // 2
    return -torch.nn.functional.logsigmoid(scores[:half] - scores[half:]).mean()


def measure_pass(model, head: str, dtype: str, rows: int, seq: int, checkpointing: bool, backward: bool = True,
                 keep_gradients: bool = True) -> dict:
    """Kept bytes (saved tensors) and the resident peak of one forward (+ backward, its gradients kept, as in
    training, or, where they would not fit, dropped as soon as each is accumulated)."""
    import contextlib

    import torch

    set_checkpointing(model, checkpointing)
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, model.config.vocab_size, (rows, seq), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if rows > 1:  # a padded batch, as real ones are: the last row ends an eighth early (right padding)
        attention_mask[-1, seq - seq // 8:] = 0
        input_ids[-1, seq - seq // 8:] = model.config.pad_token_id
    prompt = seq // 4
    params = list(model.parameters())
    param_storages = {p.untyped_storage().data_ptr() for p in params}
    saved: dict[int, tuple[int, str]] = {}  # storage address -> (bytes, kind)

    def pack(tensor):
        storage = tensor.untyped_storage()
        address = storage.data_ptr()
        if address and address not in param_storages and address not in saved:
            # autocast's low-precision copy of a weight: a cast whose input is a parameter (an AccumulateGrad leaf)
            # (saved as a view of it: its transpose)
            cast = (tensor._base if tensor._base is not None else tensor).grad_fn
            copy = type(cast).__name__ == "ToCopyBackward0" and any(
                type(f).__name__ == "AccumulateGrad" for f, _ in cast.next_functions)
            kind = "weight_copy" if copy else "tokens"
            saved[address] = (storage.nbytes(), kind)
        return tensor

    def layer_inputs(module, args, kwargs):  # what non-reentrant checkpointing keeps of a layer: its inputs
        for value in list(args) + list(kwargs.values()):
            values = value if isinstance(value, tuple) else (value,)
            for tensor in values:
                if torch.is_tensor(tensor) and tensor.untyped_storage().data_ptr() not in saved:
                    saved[tensor.untyped_storage().data_ptr()] = (tensor.untyped_storage().nbytes(), "checkpoint")

    handles = []
    if checkpointing:
        handles = [layer.register_forward_pre_hook(layer_inputs, with_kwargs=True) for layer in model.model.layers
                   [: model.config.num_hidden_layers]]
    dropped = [0]

    def drop(param):
        dropped[0] += param.grad.numel() * param.grad.element_size()
        param.grad = None

    if not keep_gradients:
        handles += [p.register_post_accumulate_grad_hook(drop) for p in params if p.requires_grad]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "autocast" else contextlib.nullcontext()
    start = time.perf_counter()
    base, _ = resident()
    reset_peak()
    with autocast, torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = update_loss(model, head, input_ids, attention_mask, prompt)
    after_forward, forward_peak = resident()
    pass_peak = None
    if backward:
        loss.backward()
        _, pass_peak = resident()
    seconds = time.perf_counter() - start
    for handle in handles:
        handle.remove()
    kinds: dict[str, int] = {}
    for nbytes, kind in saved.values():
        kinds[kind] = kinds.get(kind, 0) + nbytes
    del loss
    if keep_gradients:
        dropped[0] = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
        for p in params:
            p.grad = None
    return {"rows": rows, "seq": seq, "tokens": rows * seq, "checkpointing": checkpointing,
            "kept_bytes": sum(kinds.values()), "kept_by_kind": kinds,
            "resident_after_forward": after_forward - base, "forward_peak": forward_peak - base,
            "pass_peak": None if pass_peak is None else pass_peak - base, "gradient_bytes": dropped[0],
            "gradients_kept": keep_gradients, "seconds": round(seconds, 2)}


def measure_state(model, dtype: str, process_base: int) -> dict:
    """One AdamW step after a small real pass (gradients kept), as coreward's learners step: float32 weights
    step themselves; bf16 weights step through float32 masters (made beside the model, given float32 copies of
    the gradients: rm/learner.py's `_optimizer_step`). The bytes are counted from the tensors, and the resident
    bytes above the process's baseline (before the model was built) read at the step's end and peak."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    masters = [p.detach().float().clone() for p in params] if dtype == "bf16" else None
    optimizer = torch.optim.AdamW(masters or params, lr=1e-5)
    set_checkpointing(model, False)
    generator = torch.Generator().manual_seed(2)
    input_ids = torch.randint(1, model.config.vocab_size, (2, 16), generator=generator)
    reset_peak()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "autocast"):
        loss = update_loss(model, "lm" if hasattr(model, "lm_head") else "score", input_ids,
                           torch.ones_like(input_ids), 4)
    loss.backward()
    if masters is not None:
        for master, p in zip(masters, params):
            master.grad = p.grad.detach().float()
    optimizer.step()
    if masters is not None:
        with torch.no_grad():
            for master, p in zip(masters, params):
                p.copy_(master)
    now, peak = status()["RssAnon:"], resident()[1] - status()["RssFile:"]

    def size(tensors):
        return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))

    result = {"parameters": sum(p.numel() for p in params), "weight_bytes": size(params),
              "grad_bytes": size(p.grad for p in params) + size(m.grad for m in masters or []),
              "moment_bytes": size(v for s in optimizer.state.values() for v in s.values() if v.dim()),
              "master_bytes": size(masters or []), "resident": now - process_base,
              "step_peak": peak - process_base}  # the peak's anonymous part: VmHWM less the mapped files' pages now
    optimizer.zero_grad(set_to_none=True)
    for p in params:
        p.grad = None
    return result


def worker(spec: dict) -> None:
    """Measure one group (a shape, head, dtype) in this process: one model with the most layers asked for,
    cut to fewer for the smaller cases."""
    import torch
    import transformers  # noqa: F401 (imported before the baseline: the state is what the model adds)
    import trl.trainer.utils  # noqa: F401

    torch.set_num_threads(int(os.environ.get("COREWARD_BENCH_THREADS", "2")))
    process_base = status()["RssAnon:"]
    started = time.perf_counter()
    fewest = min(p[0] for p in spec["passes"]) if spec["passes"] else spec.get("state_layers", 1)
    if spec.get("state"):  # first, on a model of its own (the passes' leftovers would blur the resident bytes)
        model = build(spec["shape"], fewest, spec["head"], spec["dtype"], "sdpa")
        result = measure_state(model, spec["dtype"], process_base)
        result.update(event="state", shape=spec["shape"], head=spec["head"], dtype=spec["dtype"], layers=fewest)
        print(json.dumps(result), flush=True)
        del model
        gc.collect()
    if not spec["passes"]:
        return
    model = build(spec["shape"], max(p[0] for p in spec["passes"]), spec["head"], spec["dtype"], "sdpa")
    all_layers = model.model.layers
    measure_pass(model, spec["head"], spec["dtype"], 2, 16, False)  # thread pools and kernels allocate once
    print(json.dumps({"event": "built", "seconds": round(time.perf_counter() - started, 1)}), flush=True)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for layers, attn, checkpointing, rows, seq, backward in spec["passes"]:
        model.model.layers = all_layers[:layers]
        model.config.num_hidden_layers = layers
        model.set_attn_implementation(attn)
        keep = resident_estimate(spec["shape"], layers, spec["head"], spec["dtype"]) + weight_bytes < (
            spec.get("max_gib", 12) * GIB)  # the gradients (as many bytes as the weights) fit beside the pass
        result = measure_pass(model, spec["head"], spec["dtype"], rows, seq, checkpointing, backward, keep)
        result.update(event="pass", shape=spec["shape"], head=spec["head"], dtype=spec["dtype"], attn=attn,
                      layers=layers)
        print(json.dumps(result), flush=True)


def run_group(spec: dict, timeout: float) -> list[dict]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0",
               TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    proc = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    rows = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:  # one JSON line per measurement, as it is made
        if line.startswith("{"):
            rows.append(json.loads(line))
            print("  " + line.strip()[:160], file=sys.stderr, flush=True)
        if time.monotonic() > deadline:
            proc.kill()
    proc.wait()
    if proc.returncode != 0:  # a failed or killed group: what it measured is kept
        print(f"group {spec['shape']} {spec['head']} {spec['dtype']} failed ({proc.returncode}):\n"
              f"{proc.stderr.read()[-2000:]}", file=sys.stderr)
    return rows


def groups(args) -> list[dict]:
    """The measurement processes, one per shape × head × dtype, and the passes each runs. Every layer count with
    SDPA, checkpointing off and on (forward only: the kept bytes); the backward (the pass's peak) at the fewest
    layers; eager attention at the two fewest layers of the shapes in --eager-shapes, at rows × seq and
    rows/2 × 2·seq tokens (the same count: eager's seq² attention scores separate from the per-token terms)."""
    layers = sorted(int(n) for n in args.layers.split(","))
    out = []
    for shape in args.shapes.split(","):
        for head in args.heads.split(","):
            dtypes = args.policy_dtypes if head == "lm" else args.dtypes
            rows, seq = (args.rows, args.policy_seq) if head == "lm" else (args.rows, args.seq)
            for dtype in dtypes.split(","):
                # the layer counts whose forward fits in --max-gib; the backward (the pass's peak) where it fits too
                counts = [n for n in layers if forward_estimate(shape, n, head, dtype) < args.max_gib * GIB]
                backward = resident_estimate(shape, counts[0], head, dtype) < args.max_gib * GIB if counts else False
                if head == "lm" and shape != "qwen2.5-1.5b":  # its layers are the RM's: 4 layers at one shape
                    counts = counts[:2]
                state = dtype != "autocast" and bool(counts) and state_estimate(shape, counts[0], head, dtype) < (
                    args.max_gib * GIB)
                if not counts or (args.state_only and not state):
                    continue
                passes = [[n, "sdpa", ckpt, rows, seq, backward and n == counts[0]] for n in counts
                          for ckpt in (False, True)]
                if head == "score" and shape in args.eager_shapes.split(","):
                    longer = [max(1, rows // 2), seq * rows // max(1, rows // 2)]
                    passes += [[n, "eager", False, *tokens, False] for n in counts[:2] for tokens in ([rows, seq], longer)]
                out.append({"shape": shape, "head": head, "dtype": dtype, "state_layers": counts[0],
                            "passes": [] if args.state_only else passes, "state": state})
    priority = {("score", "bf16"): 0, ("lm", "autocast"): 1, ("score", "fp32"): 2, ("lm", "fp32"): 3,
                ("score", "autocast"): 4, ("lm", "bf16"): 5}  # Cooper's RM, coreward's policy, then the rest
    return sorted(out, key=lambda g: priority.get((g["head"], g["dtype"]), 9))


def parameter_estimate(shape: str, layers: int, head: str) -> int:
    """Parameters of a shape (for choosing what fits in --max-gib; the planner's count is what is checked)."""
    c = SHAPES[shape]
    hd = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
    h, i = c["hidden_size"], c["intermediate_size"]
    layer = h * hd * (2 * c["num_attention_heads"] + 2 * c["num_key_value_heads"]) + 3 * h * i
    heads = 1 if head == "score" or c["tie_word_embeddings"] else 2
    return c["vocab_size"] * h * heads + layer * layers


def forward_estimate(shape: str, layers: int, head: str, dtype: str) -> int:
    """Weights + a forward's logits tiles and kept activations (a generous GiB)."""
    return parameter_estimate(shape, layers, head) * (2 if dtype == "bf16" else 4) + 2 * GIB


def resident_estimate(shape: str, layers: int, head: str, dtype: str) -> int:
    """Weights + the backward's transients (the head's float32 gradient buffer and the embedding gradient)."""
    c = SHAPES[shape]
    vh = c["vocab_size"] * c["hidden_size"]
    weight = 2 if dtype == "bf16" else 4
    return parameter_estimate(shape, layers, head) * weight + vh * (12 if head == "lm" else 4) + 2 * GIB


def state_estimate(shape: str, layers: int, head: str, dtype: str) -> int:
    per_parameter = 20 if dtype == "bf16" else 16  # bf16: weights 2, grads 2 + 4, masters 4, moments 8
    largest = SHAPES[shape]["vocab_size"] * SHAPES[shape]["hidden_size"] * 4  # AdamW's per-tensor temporaries
    return parameter_estimate(shape, layers, head) * per_parameter + 3 * largest + GIB


# ------------------------------------------------------------------------------------------ predictions and tables

def planner():
    try:
        from coreward.runtime import memory
    except ImportError:
        return None
    return memory


def model_shape(memory, shape: str, layers: int):
    spec = dict(SHAPES[shape], num_hidden_layers=layers)
    spec.setdefault("head_dim", spec["hidden_size"] // spec["num_attention_heads"])
    return memory.ModelShape.from_config(spec)


def predict_pass(memory, row: dict) -> int | None:
    """The planner's activation bytes of a pass (with gradient checkpointing: the layers' inputs and the one layer
    that backward recomputes at a time)."""
    if memory is None:
        return None
    dtype = "float32" if row["dtype"] == "fp32" else "bfloat16"
    return memory.activation_bytes(model_shape(memory, row["shape"], row["layers"]), row["rows"], row["seq"],
                                   dtype=dtype, weights_dtype="bfloat16" if row["dtype"] == "bf16" else "float32",
                                   attn_implementation=row["attn"], gradient_checkpointing=row["checkpointing"],
                                   head=row["head"])


def predict_transient(memory, row: dict) -> int:
    """The planner's transients of a pass beyond its kept activations: TRL's fused head's tiles and float32
    gradient buffers for a policy (none modelled for a reward model)."""
    if memory is None or row["head"] != "lm" or not hasattr(memory, "lm_head_tile_bytes"):
        return 0
    dtype = "float32" if row["dtype"] == "fp32" else "bfloat16"
    return memory.lm_head_tile_bytes(model_shape(memory, row["shape"], row["layers"]), row["tokens"], dtype=dtype,
                                     on_gpu=False, backward=True)


def comparable(rows: list[dict], row: dict) -> int:
    """The measured counterpart of `predict_pass`: the kept bytes, and with checkpointing also one layer's kept
    bytes without it (the layer backward recomputes: 2 layers' kept bytes less 1 layer's, same shape and tokens)."""
    if not row["checkpointing"]:
        return row["kept_bytes"]
    same = {r["layers"]: r["kept_bytes"] for r in rows if r.get("event") == "pass" and not r["checkpointing"]
            and all(r[k] == row[k] for k in ("shape", "head", "dtype", "attn", "rows", "seq"))}
    if 1 not in same or 2 not in same:
        return 0
    return row["kept_bytes"] + same[2] - same[1]


def predict_state(memory, row: dict) -> int | None:
    if memory is None:
        return None
    count = memory.parameter_count(model_shape(memory, row["shape"], row["layers"]), row["head"])
    per_parameter = 20 if row["dtype"] == "bf16" else 16  # bf16 + float32 masters: 2 + 4 + (2 + 4) + 8
    return count * per_parameter


def ratio(predicted: int | None, measured: int) -> float | None:
    return None if predicted is None or not measured else predicted / measured


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 20):,.1f}"


def slopes(passes: list[dict]) -> None:
    """Per layer and outside the layers: kept bytes per token per layer (the slope from the fewest to the most
    layers measured, autocast's weight copies apart, per layer) and the intercept per token (outside the layers)."""
    cases: dict[tuple, dict[int, dict]] = {}
    for r in passes:
        key = (r["shape"], r["head"], r["dtype"], r["attn"], r["checkpointing"], r["rows"], r["seq"])
        cases.setdefault(key, {})[r["layers"]] = r
    print()
    print("| shape | head | dtype | attn | ckpt | rows×seq | layers | kept B/token/layer | weight copies B/layer "
          "| outside the layers B/token | resident after forward / kept |")
    print("|" + "---|" * 11)
    for key, by_layers in cases.items():
        if len(by_layers) < 2:
            continue
        few, most = min(by_layers), max(by_layers)
        a, b = by_layers[few], by_layers[most]
        copies = [r["kept_by_kind"].get("weight_copy", 0) if r["dtype"] == "autocast" else 0 for r in (a, b)]
        tokens_a, tokens_b = a["kept_bytes"] - copies[0], b["kept_bytes"] - copies[1]
        per_layer = (tokens_b - tokens_a) / (most - few) / a["tokens"]
        copies_per_layer = (copies[1] - copies[0]) / (most - few)
        outside = tokens_a / a["tokens"] - few * per_layer
        fit = max(r["resident_after_forward"] / r["kept_bytes"] for r in by_layers.values())
        shape, head, dtype, attn, ckpt, rows, seq = key
        print(f"| {shape} | {head} | {dtype} | {attn} | {'on' if ckpt else 'off'} | {rows}×{seq} "
              f"| {','.join(map(str, sorted(by_layers)))} | {per_layer:,.0f} | {copies_per_layer:,.0f} "
              f"| {outside:,.0f} | {fit:.3f} |")


def report(rows: list[dict], memory, tolerance: float) -> int:
    """Print predicted / measured per case; return the number of cases outside the tolerance."""
    passes = list({tuple(r[k] for k in ("shape", "head", "dtype", "attn", "checkpointing", "layers", "rows", "seq")): r
                   for r in rows if r.get("event") == "pass"}.values())  # a case measured again: the last one
    states = list({(r["shape"], r["head"], r["dtype"]): r for r in rows if r.get("event") == "state"}.values())
    outside = 0
    print("| shape | head | dtype | attn | ckpt | layers | rows×seq | kept MiB | measured MiB | predicted MiB | ratio "
          "| kept B/token | pass peak MiB | predicted peak MiB | peak ratio |")
    print("|" + "---|" * 15)
    for r in passes:
        predicted = predict_pass(memory, r)
        measured = comparable(passes, r)
        q = ratio(predicted, measured)
        bad = q is not None and abs(q - 1) > tolerance
        outside += bad
        kept_gradients = r.get("gradients_kept", False)
        peak = r["pass_peak"]
        peak_predicted = None if predicted is None or peak is None else (
            predicted + predict_transient(memory, r) + (r["gradient_bytes"] if kept_gradients else 0))
        peak_q = ratio(peak_predicted, peak) if peak else None
        print(f"| {r['shape']} | {r['head']} | {r['dtype']} | {r['attn']} | {'on' if r['checkpointing'] else 'off'} "
              f"| {r['layers']} | {r['rows']}×{r['seq']} | {mib(r['kept_bytes'])} | {mib(measured or None)} "
              f"| {mib(predicted)} | {'-' if q is None else f'{q:.3f}'}{' OUTSIDE' if bad else ''} "
              f"| {r['kept_bytes'] / r['tokens']:,.0f} | {mib(peak)}{'' if peak is None else ' + grads' if kept_gradients else ' dropped'} "
              f"| {mib(peak_predicted)} "
              f"| {'-' if peak_q is None else f'{peak_q:.2f}'} |")
    slopes(passes)
    if states:
        print()
        print("| shape | head | dtype | layers | parameters | weights+grads+moments+masters MiB | predicted MiB "
              "| ratio | resident after step MiB | resident / tensors | step peak MiB | predicted step peak MiB "
              "| step peak ratio |")
        print("|" + "---|" * 13)
    for r in states:
        measured = r["weight_bytes"] + r["grad_bytes"] + r["moment_bytes"] + r["master_bytes"]
        predicted = predict_state(memory, r)
        q = ratio(predicted, measured)
        bad = q is not None and abs(q - 1) > tolerance
        outside += bad
        # plan.py's optimizer step on a CPU: AdamW's temporaries of its largest tensor (the embedding), float32
        largest = SHAPES[r["shape"]]["vocab_size"] * SHAPES[r["shape"]]["hidden_size"] * 4
        step = None if predicted is None else predicted + largest
        step_q = ratio(step, r["step_peak"])
        print(f"| {r['shape']} | {r['head']} | {r['dtype']} | {r['layers']} | {r['parameters']:,} | {mib(measured)} "
              f"| {mib(predicted)} | {'-' if q is None else f'{q:.3f}'}{' OUTSIDE' if bad else ''} "
              f"| {mib(r['resident'])} | {r['resident'] / measured:.3f} | {mib(r['step_peak'])} | {mib(step)} "
              f"| {'-' if step_q is None else f'{step_q:.3f}'} |")
    return outside


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--heads", default="lm,score", help="lm (policy), score (reward model)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="the reward model's: fp32, autocast, bf16")
    parser.add_argument("--policy-dtypes", default="fp32,autocast", help="the policy's (coreward's policy modes)")
    parser.add_argument("--layers", default="1,2,4")
    parser.add_argument("--eager-shapes", default="qwen2.5-1.5b,llama-3.2-1b",
                        help="the shapes whose reward model is also measured with eager attention")
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--seq", type=int, default=512, help="the reward model's tokens per row")
    parser.add_argument("--policy-seq", type=int, default=256, help="the policy's tokens per row")
    parser.add_argument("--max-gib", type=float, default=12.0, help="skip the cases estimated above this many GiB")
    parser.add_argument("--quick", action="store_true", help="Qwen2.5-1.5B's shape, 1-2 layers, SDPA, fp32/autocast")
    parser.add_argument("--raw", action="store_true", help="measure only: no planner, no ratios")
    parser.add_argument("--json", type=Path, help="write every measurement to this file")
    parser.add_argument("--from-json", type=Path, nargs="+", help="print the table from --json files, no measuring")
    parser.add_argument("--state-only", action="store_true", help="measure the state terms only (no passes)")
    parser.add_argument("--resume", action="store_true", help="keep --json's measurements, measure the groups it lacks")
    parser.add_argument("--tolerance", type=float, default=0.15)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per measurement process")
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if args.quick:
        args.shapes, args.layers, args.eager_shapes = "qwen2.5-1.5b", "1,2", ""
        args.dtypes = args.policy_dtypes = "fp32,autocast"
    memory = None if args.raw else planner()
    if args.from_json:
        rows = [row for path in args.from_json for row in json.loads(path.read_text())]
    else:
        rows = json.loads(args.json.read_text()) if args.resume and args.json and args.json.is_file() else []
        done = {(r["shape"], r["head"], r["dtype"]) for r in rows if "shape" in r}
        for spec in groups(args):
            if (spec["shape"], spec["head"], spec["dtype"]) in done:
                continue
            started = time.perf_counter()
            rows += run_group(spec, args.timeout)
            print(f"measured {spec['shape']} {spec['head']} {spec['dtype']} ({len(spec['passes'])} passes) in "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    outside = report(rows, memory, args.tolerance)
    if memory is None and not args.raw:
        print("coreward.runtime.memory is not importable: measurements only")
    if outside:
        print(f"{outside} case(s) outside ±{args.tolerance:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
