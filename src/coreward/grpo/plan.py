"""The memory plan of a training run: what one GRPO step holds per device, phase by phase, from the config and the
models' config.json alone (no weights load). `coreward plan` prints it; `coreward train` checks it before loading.

A step has five phases; an item counts in every phase it is held through:

    generation        vLLM's reservation (colocated) or transformers' key/value cache
    reward scoring    the reward models' no-grad passes (and a no-grad pass of the policy for logit rewards)
    RM update         Cooper's RM forward and backward: its gradients and one pass's kept activations
    RM step           Cooper's RM AdamW step: float32 gradient copies and AdamW's temporaries
    policy update     the policy's gradients, one micro-batch's kept activations and the log-probability head's tiles

Resident through all of them: the policy's weights and AdamW state (after the first step), TRL's KL reference,
the kl_from_init copy, the EMA teacher, the reward models' weights (unless offloaded between uses) and their
optimizer state, vLLM's reservation, the CUDA context. The peak is the largest phase. Each term's formula and the
plan's measured accuracy: docs/memory.md; the shape arithmetic: runtime/memory.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coreward.grpo.config import TrainConfig
from coreward.runtime.errors import CorewardError
from coreward.runtime.memory import (
    DTYPE_BYTES,
    GIB,
    ModelShape,
    activation_bytes,
    config_path,
    format_bytes,
    kv_cache_bytes,
    lm_head_tile_bytes,
    parameter_count,
    parse_bytes,
    scoring_bytes,
)


PHASES = ("generation", "reward scoring", "RM update", "RM step", "policy update")
ALL = PHASES
ENGINES = ("one", "ddp", "fsdp2", "zero2", "zero3")
# the accelerate configs shipped in configs/accelerate/, by the engine they launch
ENGINE_OF_ACCELERATE_CONFIG = {"zero2": "zero2", "zero3": "zero3", "fsdp2": "fsdp2", "multi_gpu": "ddp"}
CUDA_CONTEXT_BYTES = 1 * GIB  # CUDA context, cuBLAS workspaces and NCCL buffers of one process (nvidia-smi shows ~0.5-1 GiB)
# what `import torch, transformers, trl` and coreward's modules hold in one process on the CPU before any model loads:
# the RSS of `python -c "import coreward.grpo.train, trl, torch"` (docs/memory.md: how it was measured)
CPU_BASELINE_BYTES = int(0.6 * GIB)
RM_MAX_LENGTH = 1024  # VerifyRM's max_length (rm/model.py): the tokens of one RM input at most
SPARE = 0.10  # the paper configs' declared hardware keeps at least this fraction free


@dataclass(frozen=True)
class Hardware:
    """Where a run trains: `gpus` processes of `device_bytes` each under `engine`, or the CPU (one process)."""

    gpus: int = 1
    device_bytes: int = 80 * GIB
    engine: str = "one"
    device: str = "cuda"  # "cuda" or "cpu"

    def describe(self) -> str:
        if self.device == "cpu":
            return f"the CPU's {format_bytes(self.device_bytes)} of RAM, one process"
        return f"{self.gpus} x {format_bytes(self.device_bytes)} GPU(s), engine {self.engine}"


@dataclass
class Item:
    name: str
    bytes: int
    phases: tuple[str, ...]
    note: str = ""


@dataclass
class Suggestion:
    settings: list[str]  # `--set` items (or `--gpus N --engine E`)
    cost: str
    peak_bytes: int

    def command_line(self) -> str:
        return " ".join(s if s.startswith("--") else f"--set {s}" for s in self.settings)


@dataclass
class Plan:
    hardware: Hardware
    items: list[Item]
    notes: list[str] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)

    def phase_bytes(self, phase: str) -> int:
        return sum(item.bytes for item in self.items if phase in item.phases)

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=self.phase_bytes)

    @property
    def peak_bytes(self) -> int:
        return self.phase_bytes(self.peak_phase)

    @property
    def device_bytes(self) -> int:
        return self.hardware.device_bytes

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.device_bytes

    @property
    def spare(self) -> float:
        """The fraction of the device the peak leaves free (negative: over)."""
        return 1 - self.peak_bytes / self.device_bytes

    def largest_items(self, count: int = 5) -> list[Item]:
        peak = self.peak_phase
        return sorted((i for i in self.items if peak in i.phases), key=lambda i: -i.bytes)[:count]

    def summary(self) -> str:
        """One line: the run log's `memory:` line."""
        where = "CPU RAM" if self.hardware.device == "cpu" else f"{self.hardware.gpus} x GPU ({self.hardware.engine})"
        return (f"planned peak {format_bytes(self.peak_bytes)} per device ({self.peak_phase}), "
                f"{format_bytes(self.device_bytes)} on {where}")

    def to_json(self) -> dict[str, Any]:
        return {
            "peak_bytes": self.peak_bytes, "device_bytes": self.device_bytes, "fits": self.fits,
            "peak_phase": self.peak_phase, "spare": round(self.spare, 4),
            "hardware": dataclasses.asdict(self.hardware),
            "phases": {phase: self.phase_bytes(phase) for phase in PHASES},
            "items": [{"name": i.name, "bytes": i.bytes, "phases": list(i.phases), "note": i.note} for i in self.items],
            "notes": self.notes,
            "suggestions": [{"set": s.settings, "cost": s.cost, "peak_bytes": s.peak_bytes} for s in self.suggestions],
        }

    def render(self) -> str:
        """The plan as `coreward plan` prints it."""
        lines = [f"memory plan per device: {self.hardware.describe()}", ""]
        width = max(len(i.name) for i in self.items)
        short = {"generation": "gen", "reward scoring": "score", "RM update": "rm-upd", "RM step": "rm-step",
                 "policy update": "policy"}
        for item in sorted(self.items, key=lambda i: -i.bytes):
            phases = "all phases" if item.phases == ALL else ", ".join(short[p] for p in item.phases)
            lines.append(f"  {item.name:<{width}}  {format_bytes(item.bytes):>10}  [{phases}]"
                         + (f"  {item.note}" if item.note else ""))
        lines.append("")
        for phase in PHASES:
            mark = "  <- peak" if phase == self.peak_phase else ""
            lines.append(f"  phase {phase:<15} {format_bytes(self.phase_bytes(phase)):>10}{mark}")
        verdict = "fits" if self.fits else "does NOT fit"
        lines += ["", f"peak {format_bytes(self.peak_bytes)} ({self.peak_phase}) of {format_bytes(self.device_bytes)}: "
                  f"{verdict} ({self.spare:+.0%} spare)"]
        lines += [f"note: {note}" for note in self.notes]
        if not self.fits:
            if self.suggestions:
                lines.append("settings that would fit (each checked by planning again):")
                for s in self.suggestions:
                    lines.append(f"  {s.command_line()}   -> {format_bytes(s.peak_bytes)}; {s.cost}")
            else:
                lines.append("no single setting coreward knows makes it fit: use more GPUs with a sharding engine, "
                             "a smaller model or shorter sequences")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- hardware
def declared_hardware(config_file: str | Path) -> dict[str, Any]:
    """The `# gpus: N x SIZE` and `# engine: E` comments of a config file (or of the files its `base:` chain names),
    as {gpus, device_bytes, engine}; the engine also from a comment launching configs/accelerate/<name>.yaml."""
    import yaml

    found: dict[str, Any] = {}
    path = Path(config_file)
    seen: set[Path] = set()
    while path.is_file() and path.resolve() not in seen:
        seen.add(path.resolve())
        text = path.read_text()
        for line in text.splitlines():
            if not line.lstrip().startswith("#"):
                continue
            gpus = re.search(r"#\s*gpus:\s*(\d+)\s*x\s*([\d.]+\s*[A-Za-z]+)", line)
            if gpus and "gpus" not in found:
                try:
                    found["gpus"], found["device_bytes"] = int(gpus.group(1)), parse_bytes(gpus.group(2))
                except ValueError as err:
                    raise CorewardError(f"{path}: the `# gpus: N x SIZE` comment: {err}") from None
            engine = re.search(r"#\s*engine:\s*(\w+)", line)
            if engine and "engine" not in found:
                found["engine"] = engine.group(1)
            launch = re.search(r"configs/accelerate/(\w+)\.yaml", line)
            if launch and "engine" not in found and launch.group(1) in ENGINE_OF_ACCELERATE_CONFIG:
                found.setdefault("launch_engine", ENGINE_OF_ACCELERATE_CONFIG[launch.group(1)])
        try:
            base = (yaml.safe_load(text) or {}).get("base")
        except yaml.YAMLError:
            base = None
        if not isinstance(base, str):
            break
        path = path.parent / base
    if "engine" not in found and "launch_engine" in found:
        found["engine"] = found["launch_engine"]
    found.pop("launch_engine", None)
    return found


def machine_ram_bytes() -> int:
    """This machine's RAM (MemTotal)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# ------------------------------------------------------------------------------------------------- the plan
@dataclass
class _Precision:
    weights: str  # the policy's weights' dtype
    compute: str  # what it computes in
    checkpointing: bool


def _grpo(config: TrainConfig, key: str, default: Any) -> Any:
    from trl import GRPOConfig

    if key in config.grpo:
        return config.grpo[key]
    fields = GRPOConfig.__dataclass_fields__
    return fields[key].default if key in fields else default


def _precision(config: TrainConfig, on_gpu: bool) -> _Precision:
    from coreward.grpo.compat import NAMES
    from coreward.grpo.config import weights_dtype
    from coreward.runtime.precision import is_low_precision

    # as grpo/train.py's compute_flags, for a GPU with bf16 (any the papers ran on) whatever this machine has
    if is_low_precision(config.model.dtype):
        flags = {"bf16": config.model.dtype == "bfloat16", "fp16": config.model.dtype == "float16"}
    else:
        flags = {"bf16": on_gpu, "fp16": False}
    flags.update({k: config.grpo[k] for k in ("bf16", "fp16") if k in config.grpo})
    weights = weights_dtype(config.model, config.lora.enabled)
    weights = "float32" if weights == "auto" else weights
    compute = "bfloat16" if flags.get("bf16") else "float16" if flags.get("fp16") else weights
    checkpointing = on_gpu
    for name in NAMES:
        if name in config.grpo:
            checkpointing = bool(config.grpo[name])
    return _Precision(weights, compute, checkpointing)


def _shape(name: str, kind: str, key: str) -> ModelShape:
    return ModelShape.from_path(name, kind, key=f"key {key}")


def _local_model(spec: Any) -> tuple[str, str] | None:
    """(model, dtype) of a local LLM (assistant or judge) a reward runs on the training device; None for an endpoint
    or a built-in assistant."""
    if isinstance(spec, str):
        if spec.startswith(("http://", "https://")) or spec in ("perturb", "rollout", "") or "#" in spec:
            return None
        return spec, "auto"
    if isinstance(spec, dict) and str(spec.get("backend", "")).lower() in ("hf", "local", "transformers", "hf_local"):
        model = spec.get("model") or spec.get("model_name_or_path")
        return (str(model), str(spec.get("dtype", "auto"))) if model else None
    return None


def _config_dtype(name: str, kind: str, key: str) -> str:
    import json

    data = json.loads(config_path(name, kind, key).read_text())
    dtype = str(data.get("dtype") or data.get("torch_dtype") or "float32")
    return dtype if dtype in DTYPE_BYTES else "float32"


class _Sharding:
    """How an engine divides a model's states over `n` processes (ZeRO paper's accounting)."""

    def __init__(self, engine: str, n: int):
        self.engine, self.n = engine, max(1, n)

    def weights(self, count: int, dtype_bytes: int, compute_bytes: int) -> tuple[int, str]:
        if self.engine == "zero3":
            return count * compute_bytes // self.n, f"{compute_bytes}-byte partitions, 1/{self.n}"
        if self.engine == "zero2":
            return count * compute_bytes, f"{compute_bytes} bytes each (DeepSpeed casts to the compute dtype)"
        if self.engine == "fsdp2":
            return count * 4 // self.n, f"float32 shards (FSDP2 upcasts trained weights), 1/{self.n}"
        return count * dtype_bytes, f"{dtype_bytes} bytes each"

    def masters(self, count: int, dtype_bytes: int, compute_bytes: int) -> int:
        if self.engine in ("zero2", "zero3"):
            return count * 4 // self.n  # DeepSpeed's float32 master partitions
        return 0  # one process, DDP: the weights are float32 already (or none are kept); FSDP2: its shards are

    def grads(self, count: int, dtype_bytes: int, compute_bytes: int) -> int:
        if self.engine in ("zero2", "zero3"):
            return count * compute_bytes // self.n
        if self.engine == "fsdp2":
            return count * 4 // self.n
        if self.engine == "ddp":  # DDP's bucket copies beside the gradients (gradient_as_bucket_view off)
            return 2 * count * dtype_bytes
        return count * dtype_bytes

    def optimizer(self, count: int, state_bytes: int) -> int:
        divide = self.n if self.engine in ("zero2", "zero3", "fsdp2") else 1
        return 2 * count * state_bytes // divide

    def frozen(self, count: int, dtype_bytes: int, compute_bytes: int) -> int:
        """A frozen copy prepared like TRL's reference: ZeRO-3 and FSDP2 shard it, ZeRO-2 (stage 0) casts it."""
        if self.engine == "zero3":
            return count * compute_bytes // self.n
        if self.engine == "zero2":
            return count * compute_bytes
        if self.engine == "fsdp2":
            return count * dtype_bytes // self.n
        return count * dtype_bytes


def prompt_token_bound(prompts: Any, tokenizer: Any = None) -> int | None:
    """The prompts' length in tokens, from the training data: with the policy's tokenizer, the longest prompt as the
    trainer will feed it (chat messages through the tokenizer's template, its default system prompt included; the
    64 longest in characters are tokenized, among which the longest in tokens is); without one (before it can be
    read), an upper bound: the longest prompt's characters (a token holds at least one), plus 16 per chat message for
    its template. None without prompts."""
    def characters(prompt: Any) -> int:
        if isinstance(prompt, str):
            return len(prompt)
        if isinstance(prompt, list):
            return sum(len(str(m.get("content", ""))) + 16 for m in prompt if isinstance(m, dict))
        return 0

    prompts = list(prompts)
    longest = max(map(characters, prompts), default=0)
    if not longest or tokenizer is None:
        return longest or None
    candidates = sorted((p for p in prompts if characters(p)), key=characters, reverse=True)[:64]
    try:
        texts = [p if isinstance(p, str) else tokenizer.apply_chat_template(p, tokenize=False,
                                                                            add_generation_prompt=True)
                 for p in candidates]
        return max(len(tokenizer(text, add_special_tokens=False).input_ids) for text in texts)
    except (ValueError, TypeError, KeyError):  # no chat template, an odd row: the bound still holds
        return longest


def data_tokenizer(model_path: str, trust_remote_code: bool = False):
    """The policy's tokenizer where it can be read without a download (a local folder, the hub's cache), else None:
    the plan then bounds prompts by their characters."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def plan_run(config: TrainConfig, hardware: Hardware, prompt_tokens: int | None = None) -> Plan:
    """The plan of one training step of `config` on `hardware` (see the module docstring). `prompt_tokens`: a bound
    on the prompts' length known from the data (`prompt_token_bound`), with data.max_prompt_tokens the smaller."""
    on_gpu = hardware.device != "cpu"
    n = 1 if not on_gpu or hardware.engine == "one" else hardware.gpus
    engine = "one" if n == 1 and hardware.engine in ("ddp",) else hardware.engine if on_gpu else "one"
    shard = _Sharding(engine, n)
    items: list[Item] = []
    notes: list[str] = []
    precision = _precision(config, on_gpu)
    policy = _shape(config.model.name_or_path, "policy", "model.name_or_path")
    count = parameter_count(policy, "lm")
    w_bytes, c_bytes = DTYPE_BYTES[precision.weights], DTYPE_BYTES[precision.compute]

    # -- the policy's states
    if config.lora.enabled:
        weights = count * w_bytes // (n if engine == "zero3" else 1)
        items.append(Item("policy weights (frozen base, LoRA)", weights, ALL, f"{policy_params(count)} in {precision.weights}"))
        trained = lora_parameter_count(policy, config.lora.r, config.lora.target_modules)
        items.append(Item("policy LoRA adapters + AdamW", trained * 16, ALL, f"{policy_params(trained)} float32 x (1 + 2 moments + grad)"))
    else:
        weights, how = shard.weights(count, w_bytes, c_bytes)
        items.append(Item("policy weights", weights, ALL, f"{policy_params(count)}, {how}"))
        masters = shard.masters(count, w_bytes, c_bytes)
        if masters:
            items.append(Item("policy float32 master weights", masters, ALL, f"DeepSpeed's, 1/{n}"))
        state_bytes = 4 if engine in ("zero2", "zero3", "fsdp2") else w_bytes
        items.append(Item("policy AdamW moments", shard.optimizer(count, state_bytes), ALL,
                          f"2 x {state_bytes} bytes per parameter" + (f", 1/{n}" if shard.optimizer(1, 1) < 2 else "")))
        items.append(Item("policy gradients", shard.grads(count, w_bytes, c_bytes), ("policy update",),
                          "set to None after each optimizer step"))

    # -- copies of the policy: TRL's reference, the kl_from_init copy, the EMA teacher
    beta = float(_grpo(config, "beta", 0.0))
    teacher = next((spec.parsed_params(f"rewards.{i}") for i, spec in enumerate(config.rewards)
                    if spec.name == "co_rewarding_2"), None)
    teacher_is_reference = teacher is not None and getattr(teacher, "as_reference", False)
    reference = 0
    if beta > 0 and not config.lora.enabled:
        reference = shard.frozen(count, w_bytes, c_bytes)
        items.append(Item("KL reference (TRL, beta > 0)", reference, ALL,
                          "the EMA teacher itself" if teacher_is_reference else "built like the policy"))
    elif beta > 0:
        notes.append("with LoRA, TRL's reference is the policy with its adapters off: no copy")
    if config.kl_from_init and not config.lora.enabled:
        if beta > 0 and not teacher_is_reference and not _grpo(config, "sync_ref_model", False):
            notes.append("kl_from_init reuses TRL's reference (beta > 0): no copy")
        else:
            items.append(Item("kl_from_init copy of the initial policy", shard.frozen(count, w_bytes, c_bytes), ALL,
                              "set kl_from_init: false to drop it"))
    if teacher is not None and not config.lora.enabled:
        if teacher_is_reference and (reference and precision.weights == "float32" and engine != "zero2"):
            notes.append("the EMA teacher is TRL's reference (float32 weights): the EMA runs on it, no copy")
        elif teacher_is_reference:
            items.append(Item("EMA teacher float32 masters", count * 4 // (n if engine in ("zero3", "fsdp2") else 1),
                              ALL, "the EMA of a 16-bit reference runs on float32 copies"))
        else:
            items.append(Item("EMA teacher (float32)", count * 4 // (n if engine in ("zero3", "fsdp2") else 1), ALL,
                              "a float32 copy of the policy"))

    # -- generation
    rows = int(_grpo(config, "per_device_train_batch_size", 8))
    steps_per_generation = int(_grpo(config, "steps_per_generation", None) or _grpo(config, "gradient_accumulation_steps", 1))
    completion = int(_grpo(config, "max_completion_length", 512) or 512)
    prompt = min(n for n in (config.data.max_prompt_tokens, prompt_tokens, 1 << 30) if n is not None)
    if config.data.max_prompt_tokens is None and prompt_tokens is None:
        prompt = 256
        notes.append("prompts planned at 256 tokens: set data.max_prompt_tokens to plan (and enforce) their length")
    seq = min(prompt + completion, policy.max_position_embeddings)
    use_vllm = bool(_grpo(config, "use_vllm", False))
    vllm_mode = str(_grpo(config, "vllm_mode", "server"))
    if use_vllm and vllm_mode == "colocate":
        utilization = float(_grpo(config, "vllm_gpu_memory_utilization", 0.3))
        sleeps = bool(_grpo(config, "vllm_enable_sleep_mode", False))
        if on_gpu:
            items.append(Item("vLLM reservation (colocated)", int(utilization * hardware.device_bytes),
                              ("generation",) if sleeps else ALL,
                              f"vllm_gpu_memory_utilization {utilization} x the device (its weights and KV cache)"
                              + ("; released outside generation (sleep mode)" if sleeps else "")))
        else:
            space = parse_bytes(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4") + "GiB")
            items.append(Item("vLLM on the CPU (weights + KV cache)", count * c_bytes + space, ALL,
                              "VLLM_CPU_KVCACHE_SPACE (default 4 GiB) plus its copy of the weights"))
    elif use_vllm:
        notes.append("vLLM runs as a server on other GPUs: nothing of it on the training devices")
    else:
        gen_rows = rows * steps_per_generation
        items.append(Item("generation KV cache (transformers)", kv_cache_bytes(policy, gen_rows, seq, precision.compute)
                          + gen_rows * policy.vocab_size * 4 * 2, ("generation",),
                          f"{gen_rows} sequences x {seq} tokens, plus the sampling logits"))

    # -- the reward models
    for i, spec in enumerate(config.rewards):
        params = spec.parsed_params(f"rewards.{i}")
        if spec.name == "cooper":
            items += _cooper_items(config, i, params, hardware, shard, engine, n, notes)
        elif spec.name == "model":
            items += _static_rm_items(i, params, on_gpu, notes)
        for role, key in (("assistant", "assistant"), ("judge", "judge"), ("positive judge", "positive_judge")):
            local = _local_model(getattr(params, key, None))
            if local is not None and getattr(params, key, None) is not None:
                name, dtype = local
                shape = _shape(name, "policy", f"rewards.{i}.params.{key}")
                dtype = _config_dtype(name, "policy", f"rewards.{i}.params.{key}") if dtype == "auto" else dtype
                dtype = dtype if dtype in DTYPE_BYTES else "float32"
                items.append(Item(f"rewards.{i} local {role} model", parameter_count(shape, "lm") * DTYPE_BYTES[dtype]
                                  + kv_cache_bytes(shape, 32, 2048, dtype), ALL, f"{dtype} weights + a generation's cache"))
    logit_rewards = [spec.name for spec in config.rewards if spec.name in ("self_certainty", "entropy")]
    if logit_rewards or (config.kl_from_init and config.kl_from_init_estimator == "exact"):
        items.append(Item("no-grad policy pass (logit rewards, exact kl_from_init)",
                          scoring_bytes(policy, rows, seq, precision.compute)
                          + lm_head_tile_bytes(policy, rows * seq, dtype=precision.compute, on_gpu=on_gpu, backward=False),
                          ("reward scoring",), f"{rows} sequences at a time, vocabulary in tiles"))

    # -- the policy's update
    attn = config.model.attn_implementation or "sdpa"
    # DeepSpeed runs the forward on its bf16 weights, FSDP2 on bf16 gathered layers (its mixed-precision policy): a
    # bf16 residual stream; one process and DDP autocast over the float32 weights (a float32 residual stream)
    runs_in = precision.compute if engine in ("zero2", "zero3", "fsdp2") else precision.weights
    items.append(Item("policy update activations", activation_bytes(
        policy, rows, seq, dtype=precision.compute, weights_dtype=runs_in, attn_implementation=attn,
        gradient_checkpointing=precision.checkpointing, head="lm"), ("policy update",),
        f"{rows} sequences x {seq} tokens, {precision.compute}, {attn}, gradient checkpointing "
        f"{'on' if precision.checkpointing else 'off'}"))
    if config.lora.enabled and config.lora.dropout > 0:
        items.append(Item("policy LoRA dropout copies", lora_dropout_bytes(
            policy, rows * seq, config.lora.target_modules, DTYPE_BYTES[runs_in], precision.checkpointing),
            ("policy update",), f"each adapted layer keeps its input's dropped-out copy and mask for backward "
            f"(dropout {config.lora.dropout:g})"))
    # under LoRA the head is frozen (PEFT trains the adapters only): TRL's fused head then makes no float32 gradient
    # of its weight (chunked_logprob.py allocates it only `if needs_weight_grad`), just its input's
    items.append(Item("policy log-prob head tiles (backward)", lm_head_tile_bytes(
        policy, rows * seq, dtype=precision.compute, on_gpu=on_gpu, backward=True, weights_dtype=precision.weights,
        head_trained=not config.lora.enabled), ("policy update",),
        "TRL's fused head: 4,096-token x 32,768-vocabulary tiles"
        + (", the input's float32 gradient (frozen head: none of its weight)" if config.lora.enabled
           else ", float32 head gradient")))
    if policy.tie_word_embeddings and not config.lora.enabled:
        grad_bytes = 4 if engine in ("zero2", "zero3", "fsdp2") else w_bytes
        items.append(Item("tied embedding's input-side gradient (transient)", policy.vocab_size * policy.hidden_size
                          * grad_bytes, ("policy update",), "a dense vocab x hidden gradient, added into the head's"))
    if engine in ("zero3", "fsdp2"):
        layer_bytes = count // max(1, policy.num_hidden_layers) * c_bytes
        embedding_bytes = policy.vocab_size * policy.hidden_size * c_bytes
        items.append(Item("gathered weights (sharded engine)", max(2 * layer_bytes, layer_bytes + embedding_bytes),
                          ("policy update", "reward scoring"),
                          "a layer's (or the embedding's) full weights while it runs, and the next one prefetched"))
    if on_gpu:
        items.append(Item("CUDA context and workspaces", CUDA_CONTEXT_BYTES, ALL, "per process"))
    else:
        items.append(Item("process baseline (torch, transformers, TRL imported)", CPU_BASELINE_BYTES, ALL,
                          "RSS before any model loads (docs/memory.md)"))
    return Plan(hardware, items, notes)


def policy_params(count: int) -> str:
    return f"{count / 1e9:.2f}B parameters" if count >= 1e8 else f"{count / 1e6:.1f}M parameters"


def _adapted_linears(shape: ModelShape, target_modules: Any) -> list[tuple[int, int]]:
    """(in, out) widths of each linear map of a layer that LoRA adapts (all-linear: the 7 of a Llama/Qwen layer)."""
    h, q, kv, inter = shape.hidden_size, shape.q_width, shape.kv_width, shape.intermediate_size
    linears = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, inter),
               "up_proj": (h, inter), "down_proj": (inter, h)}
    names = list(linears) if target_modules in ("all-linear", None) else [t for t in target_modules if t in linears]
    return [linears[name] for name in names]


def lora_parameter_count(shape: ModelShape, r: int, target_modules: Any) -> int:
    """LoRA's trained parameters: r × (in + out) per adapted linear map of each layer."""
    return shape.num_hidden_layers * sum(r * (i + o) for i, o in _adapted_linears(shape, target_modules))


def lora_dropout_bytes(shape: ModelShape, tokens: int, target_modules: Any, dtype_bytes: int,
                       checkpointing: bool) -> int:
    """What PEFT's LoRA dropout adds to backward's saved tensors: each adapted map applies its own dropout to its
    input, and keeps the dropped-out copy (for lora_A's weight gradient) and the mask (a byte a value); without
    dropout lora_A reads the layer's input, already kept. Measured on SmolLM2-135M, all-linear: a step's 32 x 121
    tokens in one pass held 16.7 GiB with dropout 0.05 against 11.7 GiB for the full model (docs/real_model.md).
    With gradient checkpointing one layer's worth at a time."""
    widths = sum(i for i, _ in _adapted_linears(shape, target_modules))
    layers = 1 if checkpointing else shape.num_hidden_layers
    return tokens * layers * widths * (dtype_bytes + 1)


def _rm_shape(path: str, key: str, notes: list[str]) -> ModelShape:
    """A reward model's shape; a paper RM that `coreward rm train` has not written yet is planned with the backbone
    of the shipped rm-train config that writes it; a demo ensemble member (`demo:2`, built on first use) as the demo
    RM it is trained like."""
    from coreward.runtime.assets import SHIPPED

    try:
        return _shape(path, "rm", key)
    except CorewardError:
        if ":" in str(path) and str(path).split(":")[0] in SHIPPED:
            return _shape(str(path).split(":")[0], "rm", key)
        backbone = _rm_train_backbone(path)
        if backbone is None:
            raise
        notes.append(f"{key}: {path} does not exist yet; planned with the backbone of {backbone[1]} that writes it "
                     f"({backbone[0]})")
        return _shape(backbone[0], "policy", key)


def _rm_train_backbone(path: str) -> tuple[str, str] | None:
    """(backbone, config file) of the shipped `coreward rm train` config whose output (`output_dir/final`) is `path`."""
    import yaml

    root = Path(__file__).resolve().parents[3] / "configs" / "rm"
    for candidate in sorted(root.glob("*.yaml")) if root.is_dir() else []:
        data = yaml.safe_load(candidate.read_text()) or {}
        out = str(data.get("output_dir", ""))
        if out and Path(path).as_posix().rstrip("/") in (f"{out}/final", out):
            backbone = (data.get("model") or {}).get("backbone")
            if backbone:
                return str(backbone), f"configs/rm/{candidate.name}"
    return None


def _rm_passes(params: Any, batch_size: int, max_length: int) -> tuple[int, int]:
    """(sequences per RM pass, tokens each) at worst (every input at max_length): `batch_size` sequences, fewer
    under `max_tokens_per_pass` (whole pairs: two sequences each; a pair longer than the budget runs alone)."""
    rows = max(2, batch_size - batch_size % 2)
    budget = getattr(params, "max_tokens_per_pass", None)
    if budget:
        rows = max(2, min(rows, (budget // max_length) // 2 * 2))
    return rows, max_length


def _cooper_items(config, i, params, hardware, shard, engine, n, notes) -> list[Item]:
    key = f"rewards.{i}.params"
    on_gpu = hardware.device != "cpu"
    shape = _rm_shape(params.rm, f"{key}.rm", notes)
    count = parameter_count(shape, "score")
    dtype = getattr(params, "rm_dtype", "float32")
    e = DTYPE_BYTES[dtype]
    own_device = str(getattr(params, "device", "auto")) not in ("auto",) and on_gpu
    if own_device:
        notes.append(f"{key}.device is {params.device}: the RM's memory is on that device, not planned here")
        return []
    sharded = engine in ("zero3", "fsdp2") and n > 1
    divide = n if sharded else 1
    if engine in ("zero2", "zero3", "fsdp2") and n > 1:
        for name in ("param_offload", "max_tokens_per_pass"):
            if getattr(params, name, None):
                notes.append(f"{key}.{name}: coreward train refuses it for an RM sharded like the policy ({engine}); "
                             "planned as if it applied")
    param_offload = bool(getattr(params, "param_offload", False))
    optimizer_offload = bool(getattr(params, "optimizer_offload", False))
    checkpointing = bool(getattr(params, "gradient_checkpointing", False))
    low = e < 4
    keeps_masters = optimizer_offload or (low and getattr(params, "master_weights", "float32") == "float32")
    weights_phases = ("reward scoring", "RM update", "RM step") if param_offload else ALL
    items = [Item(f"rewards.{i} Cooper RM weights", count * e // divide, weights_phases,
                  f"{policy_params(count)} in {dtype}" + ("; on the CPU between uses (param_offload)" if param_offload else ""))]
    if optimizer_offload or not on_gpu:
        if optimizer_offload:
            notes.append(f"{key}: the RM's AdamW state and float32 masters are on the CPU (optimizer_offload)")
    if not optimizer_offload:
        if keeps_masters:
            items.append(Item(f"rewards.{i} Cooper RM float32 masters", count * 4 // divide, ALL, "AdamW steps these"))
        state = 4 if keeps_masters or not low else e
        zero2_split = n if engine == "zero2" and n > 1 else 1
        items.append(Item(f"rewards.{i} Cooper RM AdamW moments", 2 * count * state // divide // zero2_split, ALL,
                          f"2 x {state} bytes per parameter"))
    items.append(Item(f"rewards.{i} Cooper RM gradients", count * e // divide, ("RM update", "RM step"),
                      f"in {dtype}, until the RM's optimizer step"))
    rows, length = _rm_passes(params, int(getattr(params, "batch_size", 32)),
                              min(RM_MAX_LENGTH, shape.max_position_embeddings))
    items.append(Item(f"rewards.{i} Cooper RM update activations", activation_bytes(
        shape, rows, length, dtype=dtype, attn_implementation="sdpa", gradient_checkpointing=checkpointing,
        head="score"), ("RM update",),
        f"{rows} sequences (pairs' two sides) x {length} tokens per pass, gradient checkpointing "
        f"{'on' if checkpointing else 'off'}"))
    if not optimizer_offload:
        # rm/learner.py steps AdamW one tensor at a time: the largest tensor's float32 gradient (for masters) and
        # AdamW's temporaries for it (~2 float32 copies), never a copy of every gradient at once
        largest = max(shape.vocab_size * shape.hidden_size, shape.hidden_size * shape.intermediate_size) // divide
        items.append(Item(f"rewards.{i} Cooper RM optimizer step", largest * ((4 if keeps_masters else 0) + 8),
                          ("RM step",), "one tensor at a time: its float32 gradient and AdamW's temporaries"))
    score_rows, _ = _rm_passes(params, int(getattr(params, "batch_size", 32)), length)
    items.append(Item(f"rewards.{i} Cooper RM scoring pass", scoring_bytes(shape, score_rows, length, dtype),
                      ("reward scoring",), "no grad: one layer's working set"))
    # variants (rewards/cooper_variants.py): `anchor` keeps θ_0 as float32 on the RM's device; a co-optimized ensemble
    # (`members` K) holds K RMs with their own masters, moments and θ_0, updated and scored one after another (so
    # gradients, activations and passes are one member's at a time)
    if float(getattr(params, "anchor", 0.0) or 0.0) > 0:
        items.insert(1, Item(f"rewards.{i} Cooper RM anchor weights", count * 4 // divide, ALL, "θ_0, float32 (anchor)"))
    members = int(getattr(params, "members", 1) or 1)
    if members > 1:
        held = {f"rewards.{i} Cooper RM {part}" for part in ("weights", "float32 masters", "AdamW moments", "anchor weights")}
        items = [dataclasses.replace(it, bytes=it.bytes * members, note=f"{it.note}; x {members} members")
                 if it.name in held else it for it in items]
    return items


def _static_rm_items(i, params, on_gpu, notes) -> list[Item]:
    key = f"rewards.{i}.params"
    if str(getattr(params, "device", "auto")) != "auto" and on_gpu:
        notes.append(f"{key}.device is {params.device}: the RM's memory is on that device, not planned here")
        return []
    members = getattr(params, "members", None) or ([params.path] if isinstance(params.path, str) else params.path)
    members = members() if callable(members) else list(members)
    param_offload = bool(getattr(params, "param_offload", False))
    items = []
    for m, path in enumerate(members):
        member_key = f"{key}.path" + (f".{m}" if len(members) > 1 else "")
        shape = _rm_shape(path, member_key, notes)
        dtype = _config_dtype(path, "rm", member_key) if _exists(path) else "float32"
        label = f"rewards.{i} static RM" + (f" member {m}" if len(members) > 1 else "") + " weights"
        items.append(Item(label, parameter_count(shape, "score") * DTYPE_BYTES[dtype],
                          ("reward scoring",) if param_offload else ALL, f"{dtype}, frozen"))
    rows, length = _rm_passes(params, int(getattr(params, "batch_size", 64)),
                              min(RM_MAX_LENGTH, shape.max_position_embeddings))
    items.append(Item(f"rewards.{i} static RM scoring pass", scoring_bytes(shape, rows, length, "float32"),
                      ("reward scoring",), f"{rows} sequences per pass, no grad"))
    return items


def _exists(path: str) -> bool:
    try:
        config_path(path, "rm")
        return True
    except CorewardError:
        return False


# ------------------------------------------------------------------------------------------------- suggestions
def candidate_settings(config: TrainConfig, plan: Plan) -> list[tuple[list[str], str]]:
    """Settings that lower the plan, each with what it costs (checked by `suggest` before any is proposed)."""
    out: list[tuple[list[str], str]] = []
    # an RM sharded like the policy (several processes under ZeRO or FSDP2) takes no offload nor token budget
    whole_rm = plan.hardware.engine in ("one", "ddp") or plan.hardware.gpus == 1 or plan.hardware.device == "cpu"
    for i, spec in enumerate(config.rewards if whole_rm else []):
        params = spec.parsed_params(f"rewards.{i}")
        key = f"rewards.{i}.params"
        if spec.name == "cooper":
            ckpt = [f"{key}.gradient_checkpointing=true"] if not getattr(params, "gradient_checkpointing", False) else []
            offload = [f"{key}.{name}=true" for name in ("param_offload", "optimizer_offload")
                       if not getattr(params, name, False)]
            if ckpt:
                out.append((ckpt, "the RM's update recomputes each layer in backward (one more forward per pass)"))
            for budget in (8192, 4096, 2048):
                if (getattr(params, "max_tokens_per_pass", None) or 1 << 60) > budget:
                    out.append(([f"{key}.max_tokens_per_pass={budget}"], "more, smaller RM passes (less parallel work per pass)"))
            for name in offload:
                out.append(([name], "host-device copies of the RM each step (PCIe time)" if ".param_offload" in name
                            else "the RM's AdamW step runs on the CPU (slower RM step)"))
            if offload and ckpt:
                out.append((offload + ckpt, "the authors' offload, plus the RM's gradient checkpointing"))
            if offload:
                out.append((offload + [f"{key}.max_tokens_per_pass=4096"], "the authors' offload, plus a token budget per RM pass"))
        elif spec.name == "model" and not getattr(params, "param_offload", False):
            out.append(([f"{key}.param_offload=true"], "the RM's weights copied to the device for each scoring"))
    names = {"vLLM reservation (colocated)": None}
    vllm = next((item for item in plan.items if item.name in names), None)
    if vllm is not None:
        others = plan.peak_bytes - (vllm.bytes if plan.peak_phase in vllm.phases else 0)
        room = (plan.device_bytes * (1 - SPARE / 2) - others) / plan.device_bytes
        utilization = int(room * 20) / 20
        if 0.1 <= utilization < float(_grpo(config, "vllm_gpu_memory_utilization", 0.3)):
            out.append(([f"grpo.vllm_gpu_memory_utilization={utilization}"],
                        "a smaller KV cache for vLLM: fewer sequences generated at once"))
        if not _grpo(config, "vllm_enable_sleep_mode", False):
            out.append((["grpo.vllm_enable_sleep_mode=true"], "vLLM releases its memory outside generation (wakes each step)"))
    if not _precision(config, plan.hardware.device != "cpu").checkpointing:
        out.append((["grpo.gradient_checkpointing=true"], "the policy's update recomputes each layer (~30% slower update)"))
    rows = int(_grpo(config, "per_device_train_batch_size", 8))
    accumulation = int(_grpo(config, "gradient_accumulation_steps", 1))
    if rows >= 2 and rows % 2 == 0:
        out.append(([f"grpo.per_device_train_batch_size={rows // 2}", f"grpo.gradient_accumulation_steps={accumulation * 2}"],
                    "the same global batch in twice the micro-batches"))
    if plan.hardware.device != "cpu":
        for gpus, engine in ((max(2, plan.hardware.gpus), "zero2"), (max(8, plan.hardware.gpus), "zero3"),
                             (max(8, plan.hardware.gpus), "fsdp2")):
            if (gpus, engine) != (plan.hardware.gpus, plan.hardware.engine):
                out.append(([f"--gpus {gpus}", f"--engine {engine}"],
                            f"{gpus} GPUs: accelerate launch --config_file configs/accelerate/{engine}.yaml (keep the "
                            "global batch: fewer accumulation steps or a smaller per-device batch)"))
    return out


@contextmanager
def processes(hardware: Hardware):
    """WORLD_SIZE set to the planned processes while a config is built: its batch checks count the global batch."""
    before = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(hardware.gpus if hardware.device != "cpu" else 1)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("WORLD_SIZE", None)
        else:
            os.environ["WORLD_SIZE"] = before


def suggest(config: TrainConfig, plan: Plan, limit: int = 6, prompt_tokens: int | None = None) -> list[Suggestion]:
    """The candidate settings with which the plan fits, each planned again; the cheapest kinds first, as listed."""
    from coreward.runtime.config import apply_overrides, build, to_dict

    found = []
    for settings, cost in candidate_settings(config, plan):
        sets = [s for s in settings if not s.startswith("--")]
        hardware = plan.hardware
        for s in settings:
            if s.startswith("--gpus"):
                hardware = dataclasses.replace(hardware, gpus=int(s.split()[1]))
            elif s.startswith("--engine"):
                hardware = dataclasses.replace(hardware, engine=s.split()[1])
        try:
            with processes(hardware):
                changed = build(TrainConfig, apply_overrides(to_dict(config), sets)) if sets else config
            again = plan_run(changed, hardware, prompt_tokens)
        except (CorewardError, ValueError, KeyError):
            continue
        if again.fits:
            found.append(Suggestion(settings, cost, again.peak_bytes))
    return found[:limit]


def plan_with_suggestions(config: TrainConfig, hardware: Hardware, prompt_tokens: int | None = None) -> Plan:
    plan = plan_run(config, hardware, prompt_tokens)
    if not plan.fits:
        plan.suggestions = suggest(config, plan, prompt_tokens=prompt_tokens)
    return plan


def memory_size(text: str, option: str = "--gpu-memory") -> int:
    """A device's memory as the command line gives it, in bytes: a positive number with a unit (80GiB, 24GB,
    81920MiB). A bare number is refused rather than read as bytes (`80` meant 80 GiB, not 80 bytes)."""
    example = "e.g. 80GiB, 24GB, 81920MiB"
    try:
        size = parse_bytes(text)
    except ValueError:
        raise CorewardError(f"{option}: not a memory size: {text!r} ({example})") from None
    if not re.search(r"[A-Za-z]\s*$", str(text)):
        raise CorewardError(f"{option} needs a unit: {text!r} ({example})")
    if size <= 0:
        raise CorewardError(f"{option} must be a positive size, got {text!r} ({example})")
    return size


def resolve_hardware(config_file: str | Path | None, gpus: int | None, gpu_memory: str | None, engine: str | None,
                     device: str = "cuda") -> Hardware:
    """The hardware to plan for: the command line's, else the config file's `# gpus:` / `# engine:` comments,
    else one 80 GiB GPU. `device` "cpu": this machine's RAM, one process. Bad values are one-line CorewardErrors
    naming the option (or the comment they came from)."""
    if device == "cpu":
        ram = memory_size(gpu_memory) if gpu_memory is not None else machine_ram_bytes()
        return Hardware(gpus=1, device_bytes=ram, engine="one", device="cpu")
    declared = declared_hardware(config_file) if config_file else {}
    comment = f"{config_file}'s comment"  # where a value the command line did not give came from
    size = memory_size(gpu_memory) if gpu_memory is not None else declared.get("device_bytes", 80 * GIB)
    if size <= 0:
        raise CorewardError(f"{comment} `# gpus: N x SIZE` must give a positive SIZE")
    where_gpus = "--gpus" if gpus is not None else f"{comment} `# gpus: N x SIZE`"
    gpus = gpus if gpus is not None else declared.get("gpus", 1)
    if gpus < 1:
        raise CorewardError(f"{where_gpus} must be >= 1, got {gpus}")
    where_engine = "--engine" if engine is not None else f"{comment} `# engine:`"
    engine = engine or declared.get("engine") or ("one" if gpus == 1 else "ddp")
    if engine not in ENGINES:
        raise CorewardError(f"{where_engine} must be one of {', '.join(ENGINES)}, got {engine!r}")
    return Hardware(gpus=gpus, device_bytes=size, engine=engine, device="cuda")


# ------------------------------------------------------------------------------------------------- at train time
def running_hardware() -> Hardware:
    """The hardware this process trains on: its GPU's total memory and the launch's processes and engine (from
    accelerate's environment), or the CPU's RAM."""
    import torch

    if not torch.cuda.is_available():
        return Hardware(gpus=1, device_bytes=machine_ram_bytes(), engine="one", device="cpu")
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        engine = "zero3" if os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3" else "zero2"
    elif os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        engine = "fsdp2"
    else:
        engine = "ddp" if processes > 1 else "one"
    # this process's own GPU (a context on any other would cost it memory there)
    _, total = torch.cuda.mem_get_info(int(os.environ.get("LOCAL_RANK", "0")))
    return Hardware(gpus=processes, device_bytes=total, engine=engine, device="cuda")


def check_before_loading(config: TrainConfig, plan_check: bool = True, hardware: Hardware | None = None,
                         prompt_tokens: int | None = None) -> str:
    """The run log's `memory:` line (`plan_before_loading`'s)."""
    return plan_before_loading(config, plan_check, hardware, prompt_tokens)[0]


def plan_before_loading(config: TrainConfig, plan_check: bool = True, hardware: Hardware | None = None,
                        prompt_tokens: int | None = None) -> tuple[str, Plan | None]:
    """The run log's `memory:` line and the plan it gives (None: not planned), from the plan of `config` on this
    process's hardware (before any weights load; `hardware`: this process's, unless given; `prompt_tokens`:
    `prompt_token_bound` of the data). On a GPU, a plan over the device's memory is an error naming its largest items
    and the settings that would fit, unless `plan_check` is false (`--no-plan-check`). A model the plan cannot find
    offline is said, not refused."""

    hardware = hardware or running_hardware()
    try:
        plan = plan_run(config, hardware, prompt_tokens)
    except CorewardError as err:
        return f"memory: not planned ({err})", None
    where = "CPU RAM" if hardware.device == "cpu" else f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    line = (f"memory: planned peak {format_bytes(plan.peak_bytes)} per device ({plan.peak_phase}), "
            f"{format_bytes(plan.device_bytes)} on {where}")
    if plan.fits or hardware.device == "cpu" or not plan_check:
        return line + ("" if plan.fits else " (over: --no-plan-check)"), plan
    plan.suggestions = suggest(config, plan, prompt_tokens=prompt_tokens)
    largest = ", ".join(f"{i.name} {format_bytes(i.bytes)}" for i in plan.largest_items(4))
    fixes = "; ".join(f"{s.command_line()} ({format_bytes(s.peak_bytes)}: {s.cost})" for s in plan.suggestions[:4])
    raise CorewardError(f"the memory plan of this run needs {format_bytes(plan.peak_bytes)} per GPU in its "
                        f"{plan.peak_phase} phase, over the {format_bytes(plan.device_bytes)} of {where} (largest: "
                        f"{largest}). " + (f"Settings that would fit: {fixes}. " if fixes else "")
                        + "`coreward plan --config ...` shows the whole plan; --no-plan-check trains anyway")
