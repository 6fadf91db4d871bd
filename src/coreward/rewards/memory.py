"""What a reward source holds in memory, for the memory plan of a training step (`coreward plan`, grpo/plan/).

A source declares it through one method, `RewardSource.memory_needs(params, run)` (rewards/base.py; the default
holds nothing), which returns `MemoryNeeds`: the items the source holds on each training device and the phases of
the step it holds each through (its models' weights, their optimizer state, the activations of its passes, a
teacher copy of the policy), notes for the reader, and the settings that would lower it (`Lever`s, which the
plan's advice combines with its own). The plan sums every configured source's items with the engine's own (the
policy's states, generation, the policy's update) and names no method.

    @register("my_rm")
    class MyRM(RewardSource):
        @classmethod
        def memory_needs(cls, params, run):
            return MemoryNeeds([model_weights(run, params.path, "my RM", f"{run.key}.params.path")])

`run` (`PlannedRun`) is what the plan knows of the run: the device, the engine and the processes it divides over,
the policy's shape, dtypes and micro-batch. The declarations several sources share are here: a model's weights from
its config.json, a local LLM's weights and cache, a VerifyRM's shape and passes (a paper RM that `coreward rm
train` has not written yet is planned with the backbone of the config that writes it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coreward.runtime.errors import CorewardError
from coreward.runtime.memory import (
    DTYPE_BYTES,
    ModelShape,
    config_path,
    kv_cache_bytes,
    lm_head_tile_bytes,
    parameter_count,
    scoring_bytes,
)


# The phases of a GRPO step (the plan's columns); an item counts in every phase it is held through
GENERATION, SCORING, RM_UPDATE, RM_STEP, POLICY_UPDATE = (
    "generation", "reward scoring", "RM update", "RM step", "policy update")
PHASES = (GENERATION, SCORING, RM_UPDATE, RM_STEP, POLICY_UPDATE)
ALL = PHASES  # held through the whole step
RM_MAX_LENGTH = 1024  # VerifyRM's max_length (rm/model.py): the tokens of one RM input at most
# An RM input is the template's six tags around the question, the reference answer and a completion: planned at the
# prompt's bound (the chat-templated prompt, longer than the bare question) + the completion's + this, for the tags
# and a short reference answer (a number, an expression: GSM8K's and MATH's are a few tokens)
RM_TAGS_AND_REFERENCE = 64


@dataclass
class MemoryItem:
    """Bytes held per device through `phases`. `gpu_measured`: its term has been checked against
    `torch.cuda.max_memory_allocated` on a GPU (docs/how-to/memory-plan.md, the GPU check); a plan that fits names the others.
    `heap_block`: for the tensors a pass saves for its backward and frees within its phase, the size of one (a
    layer's hidden states) where glibc's heap keeps them once freed on a CPU (grpo/plan/step.py, heap_kept)."""

    name: str
    bytes: int
    phases: tuple[str, ...]
    note: str = ""
    gpu_measured: bool = False
    heap_block: int = 0


@dataclass(frozen=True)
class Lever:
    """A setting that lowers a plan: `choices`, each a list of `--set` items, mildest first (a suggestion takes at
    most one of them), and what it costs the run."""

    choices: tuple[tuple[str, ...], ...]
    cost: str

    @classmethod
    def setting(cls, item: str, cost: str) -> Lever:
        """A lever of one `--set` item."""
        return cls(((item,),), cost)


@dataclass
class MemoryNeeds:
    """What a source holds (`RewardSource.memory_needs`)."""

    items: list[MemoryItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    levers: list[Lever] = field(default_factory=list)
    # set by a source that moves TRL's KL reference itself (an EMA teacher that is the reference): what the reference
    # then is, for the plan's note; kl_from_init can't reuse a reference that moves, and keeps its own copy
    kl_reference: str = ""


@dataclass(frozen=True)
class PlannedRun:
    """What the plan tells a source about the run it plans, per device."""

    key: str  # the source's config entry ("rewards.0"): its items' names and its levers' keys start with it
    on_gpu: bool
    engine: str  # one | ddp | zero2 | zero3 | fsdp2 (DDP on one process is "one"; the CPU is "one")
    processes: int  # the processes the engine divides over (1: one process)
    policy: ModelShape
    policy_weights_dtype: str  # the policy's weights (float32 unless model.master_weights is none, or LoRA's base)
    policy_compute_dtype: str  # what its passes compute in
    lora: bool  # the policy trains LoRA adapters over a frozen base
    kl_reference: bool  # TRL keeps a reference copy of the policy (grpo.beta > 0, no LoRA)
    rows: int  # sequences per micro-batch
    seq_len: int  # tokens each (prompt + completion)
    # what a reward source scores per step on this device, and in how many groups (prompts): an RM pass never holds
    # more sequences than there are (0: not known, planned at the source's batch size)
    completions: int = 0
    groups: int = 0

    @property
    def rm_input_tokens(self) -> int:
        """One RM input's tokens at most: the prompt's and completion's bound + RM_TAGS_AND_REFERENCE, within
        VerifyRM's max_length."""
        return min(RM_MAX_LENGTH, self.seq_len + RM_TAGS_AND_REFERENCE)

    @property
    def policy_parameters(self) -> int:
        return parameter_count(self.policy, "lm")

    @property
    def shards_like_the_policy(self) -> bool:
        """A source's model prepared with the policy is divided over the processes (ZeRO, FSDP2 on several)."""
        return self.engine in ("zero2", "zero3", "fsdp2") and self.processes > 1

    def policy_logits_pass(self) -> MemoryItem:
        """A no-grad pass of the policy over a micro-batch, its vocabulary in tiles (grpo/token_stats.py: the logit
        statistics a source asks for, and the exact kl_from_init). One pass serves every source that asks: items of
        this name are held once."""
        tokens = self.rows * self.seq_len
        return MemoryItem("no-grad policy pass (logit rewards, exact kl_from_init)",
                          scoring_bytes(self.policy, self.rows, self.seq_len, self.policy_compute_dtype)
                          + lm_head_tile_bytes(self.policy, tokens, dtype=self.policy_compute_dtype, on_gpu=self.on_gpu,
                                               backward=False),
                          (SCORING,), f"{self.rows} sequences at a time, vocabulary in tiles")


# What a lever costs, in the terms the plan knows (advice.py prints them beside each suggestion). Backward is about
# two forwards' work, so an update is ~3 forward passes; checkpointing recomputes the forward in backward: ~4.
RECOMPUTE_SHARE = 1 / 3
# host<->device copies at PCIe 4.0 x16's nominal rate (a spec figure, not a measurement): what an offload's seconds
# per step are estimated at
PCIE_BYTES_PER_S = 25e9


def recompute_cost(update: str) -> str:
    """Gradient checkpointing's cost for `update` ("RM update", "policy update")."""
    return (f"adds about {RECOMPUTE_SHARE:.0%} to the {update} time (backward recomputes each layer's forward: "
            "4 forward passes' work where 3 were)")


def copy_cost(moved_bytes: int, what: str) -> str:
    """An offload's cost: `moved_bytes` crossing PCIe each step, both ways."""
    from coreward.runtime.memory import format_bytes

    seconds = 2 * moved_bytes / PCIE_BYTES_PER_S
    return (f"moves {what} ({format_bytes(moved_bytes)}) to the GPU and back each step: about {seconds:.1f} s a step "
            "at PCIe 4.0 x16's rate")


def parameters_text(count: int) -> str:
    return f"{count / 1e9:.2f}B parameters" if count >= 1e8 else f"{count / 1e6:.1f}M parameters"


def model_shape(name: str, kind: str, key: str) -> ModelShape:
    """A model's widths from its config.json (runtime/memory.py finds it without a download); `key` names the config
    key an error is about."""
    return ModelShape.from_path(name, kind, key=f"key {key}")


def config_dtype(name: str, kind: str, key: str) -> str:
    """The dtype a model's config.json says its weights are in (float32 where it says none the plan knows)."""
    data = json.loads(config_path(name, kind, key).read_text())
    dtype = str(data.get("dtype") or data.get("torch_dtype") or "float32")
    return dtype if dtype in DTYPE_BYTES else "float32"


def model_weights(run: PlannedRun, path: str, label: str, key: str, phases: tuple[str, ...] = ALL) -> MemoryItem:
    """A frozen causal LM's weights on the training device, in its config's dtype: what a user's source that loads
    a model holds at least."""
    dtype = config_dtype(path, "policy", key)
    count = parameter_count(model_shape(path, "policy", key), "lm")
    return MemoryItem(f"{run.key} {label} weights", count * DTYPE_BYTES[dtype], phases,
                      f"{parameters_text(count)} in {dtype}, frozen")


# ------------------------------------------------------------------------------------------------- a local LLM
NO_MODEL = ("perturb", "rollout", "")  # assistants built in (no LLM), or none


def local_llm(spec: Any) -> tuple[str, str] | None:
    """(model, dtype) of an LLM (an assistant, a judge) that runs on the training device; None for an endpoint, a
    built-in assistant or nothing."""
    if isinstance(spec, str):
        if spec.startswith(("http://", "https://")) or spec in NO_MODEL or "#" in spec:
            return None
        return spec, "auto"
    if isinstance(spec, dict) and str(spec.get("backend", "")).lower() in ("hf", "local", "transformers", "hf_local"):
        model = spec.get("model") or spec.get("model_name_or_path")
        return (str(model), str(spec.get("dtype", "auto"))) if model else None
    return None


LOCAL_LLM_BATCH = 8  # llm/hf_local.py's default batch: requests per `model.generate` call
LOCAL_LLM_UNKNOWN_TOKENS = 2048  # a generation's length where nothing bounds it


def local_llm_items(run: PlannedRun, spec: Any, role: str, field_name: str,
                    tokens: int = LOCAL_LLM_UNKNOWN_TOKENS) -> list[MemoryItem]:
    """A local LLM's weights and one batch's cache (its `batch_size`, by default LOCAL_LLM_BATCH sequences, of
    `tokens`: what it reads and writes per request, within its positions), held through the step; none for an
    endpoint."""
    local = local_llm(spec)
    if local is None:
        return []
    name, dtype = local
    key = f"{run.key}.params.{field_name}"
    shape = model_shape(name, "policy", key)
    dtype = config_dtype(name, "policy", key) if dtype == "auto" else dtype
    dtype = dtype if dtype in DTYPE_BYTES else "float32"
    rows = int(spec.get("batch_size", LOCAL_LLM_BATCH)) if isinstance(spec, dict) else LOCAL_LLM_BATCH
    tokens = min(tokens, shape.max_position_embeddings)
    return [MemoryItem(f"{run.key} local {role} model", parameter_count(shape, "lm") * DTYPE_BYTES[dtype]
                       + kv_cache_bytes(shape, rows, tokens, dtype), ALL,
                       f"{dtype} weights + a generation's cache, {rows} sequences x {tokens} tokens")]


def judge_request_tokens(run: PlannedRun, format_name: str, max_tokens: int | None = None,
                         template: str | None = None) -> int:
    """One judge request's tokens at most: its prompt's template (its characters: a token holds at least one) around
    an RM input (question, reference answer, completion), and the reply's budget (`max_tokens`, else the format's)."""
    from coreward.rm.judge import JUDGE_FORMATS

    fmt = JUDGE_FORMATS[format_name]
    text = fmt.template
    if template is not None:
        try:
            text = Path(template).expanduser().read_text()
        except OSError:  # the judge's preflight names it; the plan assumes the unknown length
            text = None
    prompt = len(text) if text else LOCAL_LLM_UNKNOWN_TOKENS
    return run.rm_input_tokens + prompt + (max_tokens or fmt.max_tokens)


# ------------------------------------------------------------------------------------------------- a VerifyRM
def rm_shape(path: str, key: str, notes: list[str]) -> ModelShape:
    """A VerifyRM's shape; a paper RM that `coreward rm train` has not written yet is planned with the backbone of
    the shipped rm-train config that writes it (said in `notes`); a demo ensemble member (`demo:2`, built on first
    use) as the demo RM it is trained like."""
    from coreward.runtime.assets import SHIPPED

    try:
        return model_shape(path, "rm", key)
    except CorewardError:
        if ":" in str(path) and str(path).split(":")[0] in SHIPPED:
            return model_shape(str(path).split(":")[0], "rm", key)
        backbone = _rm_train_backbone(path)
        if backbone is None:
            raise
        notes.append(f"{key}: {path} does not exist yet; planned with the backbone of {backbone[1]} that writes it "
                     f"({backbone[0]})")
        return model_shape(backbone[0], "policy", key)


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


def rm_exists(path: str) -> bool:
    """Whether a VerifyRM's config.json is at hand (else it is planned from its backbone)."""
    try:
        config_path(path, "rm")
        return True
    except CorewardError:
        return False


def rm_passes(params: Any, batch_size: int, max_length: int, sequences: int = 0) -> tuple[int, int]:
    """(sequences per RM pass, tokens each) at worst (every input at max_length): `batch_size` sequences, no more
    than the `sequences` there are to pass (0: not known), fewer under `max_tokens_per_pass` (whole pairs: two
    sequences each; a pair longer than the budget runs alone)."""
    rows = max(2, batch_size - batch_size % 2)
    if sequences > 0:
        rows = max(2, min(rows, sequences + sequences % 2))
    budget = getattr(params, "max_tokens_per_pass", None)
    if budget:
        rows = max(2, min(rows, (budget // max_length) // 2 * 2))
    return rows, max_length


def rm_on_its_own_device(params: Any, run: PlannedRun, notes: list[str]) -> bool:
    """An RM given a device of its own (`device: cuda:1`) holds nothing on the training device (said in `notes`)."""
    if run.on_gpu and str(getattr(params, "device", "auto")) != "auto":
        notes.append(f"{run.key}.params.device is {params.device}: the RM's memory is on that device, not planned here")
        return True
    return False

