"""Fast sampling on a CPU: a sampling copy of a model, its LoRA adapters merged, in bfloat16 where the CPU multiplies
bfloat16 in hardware, kept in step with the model it copies. Every local rollout goes through it: the policy's
(grpo/trainer.py), an EMA teacher's and the periodic evaluation's (grpo/policy.py, grpo/periodic_eval.py).

Why a copy: a LoRA policy sampling as it trains pays, at every token and on every linear layer, two more small
matmuls, a dropout and an add, and reads float32 weights (twice a bfloat16 step's bytes); a decoding step is bound by
reading the weights. The copy holds W + (alpha/r) B A in the sampling dtype: one matmul per layer, half the bytes.
It follows its source by `version` (the trainer's global step: weights change only at an optimizer step), so its
samples always come from the source's current weights. The samples' log-probabilities under the policy are still
the trainer's own (TRL recomputes them in the loss); how far the copy's are from them is logged as
`sampling/logprob_mismatch/*` (`SampledLogprobs`).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessor


ENGINES = ("auto", "copy", "policy")
DTYPES = ("auto", "bfloat16", "float32")
# below this many parameters a decoding step is Python and dispatch overhead, not the weights' read: bfloat16 weights
# gain nothing there and would only change a small model's numbers (the demo policy has 0.8M)
BF16_MIN_PARAMETERS = 20_000_000


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX-BF16). Elsewhere oneDNN emulates it,
    slower than float32, so the copy stays float32."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(flags)) and torch.backends.mkldnn.is_available()


def sampling_dtype(setting: str, parameters: int) -> torch.dtype:
    """The copy's dtype for `sampling.dtype` (auto: bfloat16 on a CPU with native bfloat16, for a model big enough to
    be bound by its weights' read)."""
    if setting not in DTYPES:
        raise ValueError(f"sampling dtype must be one of {', '.join(DTYPES)}, got {setting!r}")
    if setting == "auto":
        return torch.bfloat16 if native_bf16() and parameters >= BF16_MIN_PARAMETERS else torch.float32
    return getattr(torch, setting)


@dataclass(frozen=True)
class SamplingPlan:
    """Whether rollouts sample from a copy, in which dtype, and why (a line for the run log)."""

    use_copy: bool
    dtype: torch.dtype | None
    reason: str

    def describe(self) -> str:
        if not self.use_copy:
            return f"sampling: from the training policy ({self.reason})"
        return f"sampling: from a copy of the policy in {str(self.dtype).removeprefix('torch.')} ({self.reason})"


def plan_sampling(engine: str, dtype: str, *, on_gpu: bool, use_vllm: bool, sharded: bool, lora: bool,
                  parameters: int, weights_dtype: torch.dtype = torch.float32) -> SamplingPlan:
    """Where rollouts sample (`sampling.engine`, `sampling.dtype` of the config): the trainer and the memory plan
    both decide with this. auto takes the copy on a CPU when it changes something: LoRA adapters to merge or a
    dtype other than the weights'; a GPU, vLLM and sharded policies (ZeRO-3, FSDP) keep TRL's own path."""
    if engine not in ENGINES:
        raise ValueError(f"sampling engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if use_vllm:
        return SamplingPlan(False, None, "vLLM generates")
    if engine == "policy":
        return SamplingPlan(False, None, "sampling.engine: policy")
    if sharded:
        return SamplingPlan(False, None, "a sharded policy (ZeRO-3 / FSDP) samples through its engine")
    chosen = sampling_dtype(dtype, parameters)
    if engine == "copy":
        return SamplingPlan(True, chosen, "sampling.engine: copy")
    if on_gpu:
        return SamplingPlan(False, None, "on a GPU")
    if not lora and chosen == weights_dtype:
        return SamplingPlan(False, None, "no adapters to merge and the weights' own dtype")
    why = "LoRA merged" if lora else "a full model"
    return SamplingPlan(True, chosen, f"{why}, kept in step after every optimizer step")


class UnsupportedSource(Exception):
    """A model the copy cannot follow (an adapter type other than LoRA, DoRA, a LoRA bias): sample from it as it is."""


def _peft_parts(source: torch.nn.Module) -> tuple[torch.nn.Module, bool]:
    """(the transformers model inside a PEFT wrapper, or the model itself; whether it is PEFT)."""
    if hasattr(source, "peft_config") and hasattr(source, "get_base_model"):
        return source.get_base_model(), True
    if getattr(source, "_hf_peft_config_loaded", False):  # an adapter folder loaded by transformers: LoRA layers inside
        return source, True
    return source, False


def _lora_layer(module: torch.nn.Module) -> bool:
    from peft.tuners.lora import LoraLayer

    return isinstance(module, LoraLayer)


def _wrapper(module: torch.nn.Module) -> bool:
    from peft.utils.other import ModulesToSaveWrapper

    return isinstance(module, ModulesToSaveWrapper)


def _adapters(layer: Any, adapter: str | None) -> list[str]:
    """The adapters whose weights the layer computes with: `adapter`, or the active ones; none when disabled."""
    if adapter is not None:
        return [adapter] if adapter in getattr(layer, "lora_A", {}) else []
    if getattr(layer, "disable_adapters", False):
        return []
    return [a for a in layer.active_adapters if a in getattr(layer, "lora_A", getattr(layer, "modules_to_save", {}))]


class SamplingCopy:
    """A plain transformers model of its source's architecture, in `dtype`, holding the source's current weights with
    LoRA merged. `follow(source, version, adapter)` returns it up to date: rebuilt when the architecture changes,
    its weights written again when the source, the adapter or the version changed since the last call (frozen base
    weights once per source). Built on the meta device and given its own tensors: nothing of the source (its
    hooks, TRL's patched forward) runs in it."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype
        self.model: torch.nn.Module | None = None
        self.syncs = 0  # how many times the weights were written (tests read it)
        self._held: tuple | None = None  # (id of the source's base, adapter, version)
        self._static_of: int | None = None  # id of the base whose frozen weights the copy holds
        self._config: dict | None = None

    def nbytes(self) -> int:
        if self.model is None:
            return 0
        seen = {t.data_ptr(): t.numel() * t.element_size() for t in self.model.state_dict().values()}
        return sum(seen.values())

    def invalidate(self) -> None:
        """The source's weights changed outside an optimizer step (a checkpoint loaded): write them at the next use."""
        self._held = None
        self._static_of = None

    @torch.no_grad()
    def follow(self, source: torch.nn.Module, version: Any, adapter: str | None = None) -> torch.nn.Module:
        base, is_peft = _peft_parts(source)
        config = base.config.to_dict()
        if self.model is None or type(self.model) is not type(base) or config != self._config:
            self._build(base)
            self._config = config
        key = (id(base), adapter, version)
        if key != self._held:
            self._write(base, is_peft, adapter, static=self._static_of != id(base))
            self._static_of, self._held = id(base), key
            self.syncs += 1
        return self.model

    def _build(self, base: torch.nn.Module) -> None:
        if not hasattr(type(base), "_from_config"):
            raise UnsupportedSource(f"a sampling copy needs a transformers model; got {type(base).__name__}")
        self.model = None  # the old copy's memory goes before the new one is made
        with torch.device("meta"):
            fresh = type(base)._from_config(copy.deepcopy(base.config), dtype=self.dtype)
        fresh.generation_config = copy.deepcopy(base.generation_config)
        fresh = fresh.to_empty(device=_device(base))
        fresh.tie_weights()  # embeddings and head share one tensor, as in the source
        seen: set[int] = set()
        self._targets = {}
        for name, tensor in list(fresh.named_parameters(remove_duplicate=False)) + list(
                fresh.named_buffers(remove_duplicate=False)):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                self._targets[name] = tensor
        # its parameters keep requires_grad (it only ever runs under no_grad): torch's CPU linear on bfloat16 weights
        # that require no gradient takes an unfolded matmul path, which expanded the head's weight over the batch
        # (2.3 GB for 16 rows of a 152k vocabulary) and sampled SmolLM2 2x slower
        self.model = fresh.eval()
        self._static_of = None

    def _write(self, base: torch.nn.Module, is_peft: bool, adapter: str | None, static: bool) -> None:
        """The copy's tensors from `base`: LoRA layers merged, the rest copied (frozen ones only when `static`)."""
        for name, target in self._targets.items():
            owner, _, leaf = name.rpartition(".")
            module = base.get_submodule(owner) if owner else base
            if is_peft and _lora_layer(module):
                target.copy_(_merged(module, leaf, adapter))
                continue
            if is_peft and _wrapper(module):  # a module PEFT trains whole (modules_to_save)
                chosen = _adapters(module, adapter)
                inner = module.modules_to_save[chosen[0]] if chosen else module.original_module
                target.copy_(_local(getattr(inner, leaf)))
                continue
            tensor = getattr(module, leaf, None)
            if tensor is None:
                raise UnsupportedSource(f"the copy's tensor {name} has no counterpart in the source")
            # a full model's weights all move (its optimizer, or an EMA on a frozen teacher); a PEFT base's are frozen
            if static or not is_peft or tensor.requires_grad:
                target.copy_(_local(tensor))


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor.detach()


def _merged(layer: Any, leaf: str, adapter: str | None) -> torch.Tensor:
    """A LoRA layer's weight (or bias) as it computes with it: the base's plus each adapter's delta B A · scaling."""
    base = layer.get_base_layer()
    value = _local(getattr(base, leaf))
    chosen = [] if getattr(layer, "merged", False) else _adapters(layer, adapter)
    for name in chosen:
        if layer.use_dora.get(name, False) or getattr(layer, "lora_bias", {}).get(name, False):
            raise UnsupportedSource(f"adapter {name!r} uses DoRA or a LoRA bias, which the copy does not merge")
        if not hasattr(layer, "get_delta_weight") or name not in layer.lora_A:
            raise UnsupportedSource(f"a {type(layer).__name__} layer cannot be merged")
        if leaf != "weight":
            continue
        a, b = layer.lora_A[name].weight, layer.lora_B[name].weight
        if getattr(layer, "fan_in_fan_out", False) or a.dim() != 2 or b.dim() != 2:
            value = value.float() + layer.get_delta_weight(name).float()
        else:  # W + scaling · B A in one pass, as peft's get_delta_weight computes the delta
            value = torch.addmm(value.float(), b.float(), a.float(), alpha=layer.scaling[name])
    return value


def prepared_for_sampling(model: torch.nn.Module, setting: str = "auto") -> torch.nn.Module:
    """A loaded model that only samples (an evaluation's, a local assistant's or judge's), as sampling runs it on a
    CPU: a copy with its adapters merged, in `setting`'s dtype (auto: bfloat16 where the CPU has it natively, for a
    model of 20M parameters or more), or the model itself where that changes nothing (or on a GPU)."""
    if _device(model).type != "cpu":
        return model
    base, is_peft = _peft_parts(model)
    dtype = sampling_dtype(setting, sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n))
    own = next(base.parameters()).dtype
    if setting == "auto" and own in (torch.bfloat16, torch.float16):  # never widened: a 16-bit checkpoint stays so
        dtype = own
    if not is_peft and dtype == own:
        return model
    try:
        return SamplingCopy(dtype).follow(model, 0)
    except UnsupportedSource:
        return model


class SampledLogprobs(LogitsProcessor):
    """Records the log-probability of each sampled token under the sampler, as the trainer computes the policy's:
    log_softmax(logits / temperature) over the whole vocabulary (a custom processor runs before transformers'
    temperature and top-k/top-p warpers). At a step it sees the token drawn at the step before (the last column of
    `input_ids`); `finish` takes the last one. One (rows, vocab) tensor is kept at a time."""

    def __init__(self, temperature: float):
        self.temperature = temperature if temperature > 0 else 1.0
        self.previous: torch.Tensor | None = None
        self.values: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.previous is not None:
            self.values.append(self.previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """(rows, new tokens) log-probabilities of `new_tokens`, the columns `generate` added."""
        if self.previous is not None and len(self.values) < new_tokens.size(1):
            self.values.append(self.previous.gather(1, new_tokens[:, len(self.values):len(self.values) + 1]).squeeze(1))
        self.previous = None
        if not self.values:
            return torch.zeros(new_tokens.shape, dtype=torch.float32)
        return torch.stack(self.values, dim=1)


def sample_token_ids(model: torch.nn.Module, prompt_ids: list[list[int]], generation_config: Any, pad_token_id: int,
                     eos_token_ids: list[int], temperature: float, device: Any = None
                     ) -> tuple[list[list[int]], list[list[float]]]:
    """Completions of `prompt_ids` (one per row, prompts already repeated) cut after their first end token, and the
    sampler's log-probability of each of their tokens: what TRL's `_generate_single_turn` returns."""
    from transformers import LogitsProcessorList

    from coreward.runtime.generation import left_padded, sampled_generate

    input_ids, attention = left_padded(prompt_ids, pad_token_id)
    device = device if device is not None else _device(model)
    recorder = SampledLogprobs(temperature)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = sampled_generate(model, input_ids.to(device), attention.to(device),
                                      generation_config=generation_config,
                                      logits_processor=LogitsProcessorList([recorder]))
    finally:
        model.train(was_training)
    new = output[:, input_ids.size(1):]
    logps = recorder.finish(new).cpu()
    new = new.cpu()
    ends = torch.isin(new, torch.tensor(eos_token_ids))
    lengths = torch.where(ends.any(dim=1), ends.int().argmax(dim=1) + 1, torch.full_like(ends[:, 0], new.size(1),
                                                                                         dtype=torch.long))
    completions = [row[:n].tolist() for row, n in zip(new, lengths.tolist())]
    logprobs = [row[:n].tolist() for row, n in zip(logps, lengths.tolist())]
    return completions, logprobs


def logprob_mismatch(sampler: torch.Tensor, policy: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(sum of |Δ|, max |Δ|, sum of Δ, tokens) over the masked tokens, Δ = sampler's − policy's log-probability: the
    mean |Δ| is vLLM's / TRL's sampling_logp_difference, the mean Δ a k1 estimate of KL(sampler ‖ policy) per token."""
    mask = mask.bool() & ~torch.isnan(sampler)
    delta = (sampler.float() - policy.detach().float())[mask]
    if delta.numel() == 0:
        zero = torch.zeros((), device=sampler.device)
        return zero, zero, zero, zero
    return delta.abs().sum(), delta.abs().max(), delta.sum(), torch.tensor(float(delta.numel()), device=sampler.device)
