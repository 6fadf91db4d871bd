"""The typed config of `coreward train`: model, data, reward sources, and TRL's GRPOConfig fields.

    model:   {name_or_path: demo | PATH | hub id, dtype: float32 | bfloat16 | ..., master_weights: float32 | none}
    lora:    {enabled: false, r: 16, ...}                 # peft LoRA on the policy
    data:    {train: demo | gsm8k | FILE, split: train, prompt_format: plain | chat, ...}
    rewards: [{name: rule, weight: 1.0, params: {...}}]   # several sources are summed with weights
    grpo:    {num_generations: 8, learning_rate: 1e-6, beta: 0.001, ...}   # any trl.GRPOConfig field

`grpo` keys are checked against trl.GRPOConfig itself, so every TRL option is available and a typo
is an error that names the key.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from coreward.data.prompts import INSTRUCTION
from coreward.evaluation.guard import GuardSettings
from coreward.runtime.config import check_args_keys
from coreward.runtime.distributed import print_once
from coreward.runtime.errors import CorewardError


@dataclass
class ModelSettings:
    name_or_path: str = "demo"  # "demo" = the project's warm-started demo policy
    # the precision the policy computes in: bfloat16/float16 train in mixed precision (autocast), with float32
    # weights and optimizer unless master_weights is none; float32 computes in bf16 only where grpo.bf16 says so
    # (a GPU's default); auto: the checkpoint's own dtype, loaded into float32 weights
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    # float32: the optimizer updates float32 weights whatever `dtype` computes in (runtime/precision.py says why);
    # none: a bf16/fp16 `dtype` is also the weights' dtype and AdamW steps them in place (pure low precision: steps
    # below half a rounding step of a weight are lost; warned at start). FSDP2 and DeepSpeed keep float32 weights
    # or master partitions of their own whatever this says
    master_weights: Literal["float32", "none"] = "float32"
    attn_implementation: str | None = None
    trust_remote_code: bool = False


@dataclass
class LoraSettings:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | list[str] = "all-linear"


@dataclass
class DataSettings:
    # a registered benchmark, a jsonl/json/parquet/csv file (verl parquet too), a directory (a dataset
    # repository or a save_to_disk folder) or a Hugging Face dataset id, `:SUBSET` optional (openai/gsm8k:main)
    train: str = "demo"
    split: str = "train"
    # Record field -> the data's column: {question: problem, answer: solution}; the question column may hold
    # chat messages; without an answer column the data is unlabeled (fine for self-supervised rewards)
    columns: dict[str, str] = field(default_factory=dict)
    limit: int | None = None
    data_dir: str | None = None
    # null: "plain" for a model that reads bare text (the demo policy; with no instruction, which its
    # vocabulary can't spell), else "chat" -- as `coreward eval` chooses
    prompt_format: Literal["plain", "chat"] | None = None
    instruction: str | None = INSTRUCTION
    system_prompt: str | None = None
    reference_column: str = "answer"
    max_prompt_tokens: int | None = None  # longer prompts are dropped (and counted), as verl does
    # held-out set evaluated every `eval_every` steps (0 = never)
    eval: str | None = None
    eval_split: str = "test"
    eval_columns: dict[str, str] = field(default_factory=dict)  # data.columns for the eval set
    eval_limit: int | None = 64
    eval_every: int = 0
    eval_n: int = 4
    eval_temperature: float = 0.7


@dataclass
class RewardSpec:
    name: str
    weight: float = 1.0
    params: dict = field(default_factory=dict)

    def parsed_params(self, key: str) -> Any:
        """`params` parsed by the source's Params (errors name the reward and `key.params.<field>`), once: config
        validation parses them, the engine builds the source from the same object (parsed again only when `name`
        or `params` changed since)."""
        from coreward.rewards import parse_params, source_class

        seen = (self.name, _plain_copy(self.params))
        cached = self.__dict__.get("_parsed")  # not a field: no part of the config's YAML or equality
        if cached is None or cached[0] != seen:
            cls = source_class(self.name, key=f"{key}.name")
            self.__dict__["_parsed"] = (seen, parse_params(cls, self.params, key=f"{key}.params"))
        return self.__dict__["_parsed"][1]


def default_rewards() -> list[RewardSpec]:
    """The rewards of a config that names none: the method that marks itself the default (`RewardSource.default`).
    Looked up only then: importing the reward methods loads torch, which importing this module (the CLI's help)
    skips."""
    from coreward.rewards import default_method

    return [RewardSpec(name=default_method().name)]


def _plain_copy(value: Any) -> Any:
    """A copy of the mappings and lists in `value` (what a config's params are made of); other objects as they are."""
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_copy(v) for v in value]
    return value


@dataclass
class SamplingSettings:
    """Where local rollouts sample (the policy's, an EMA teacher's, the periodic evaluation's): runtime/sampling.py."""

    # copy: a sampling copy of the policy, LoRA merged, in `dtype`, whose weights follow the policy's after every
    # optimizer step; policy: TRL's generate on the training module itself (adapters unmerged, the weights' dtype, in
    # train mode); auto: the copy on a CPU where it changes something (adapters to merge, another dtype), the policy
    # on a GPU, with vLLM, or when the policy is sharded (ZeRO-3, FSDP)
    engine: Literal["auto", "copy", "policy"] = "auto"
    # the copy's weights. auto: bfloat16 on a CPU that multiplies it in hardware (avx512_bf16 / amx_bf16) for a model
    # of 20M parameters or more (a decoding step then reads its weights: half the bytes), float32 otherwise
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"


@dataclass
class VerifierSettings:
    timeout_s: float = 10.0
    num_workers: int | None = None
    # completions are untrusted: longer ones are cut to their last N characters before any reward sees
    # them (counted in faults/truncated_completions); 100,000 leaves every real completion whole
    max_completion_chars: int = 100_000


@dataclass
class TrainConfig:
    model: ModelSettings = field(default_factory=ModelSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)
    data: DataSettings = field(default_factory=DataSettings)
    rewards: list[RewardSpec] = field(default_factory=default_rewards)
    grpo: dict = field(default_factory=dict)
    verifier: VerifierSettings = field(default_factory=VerifierSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    # how the update cuts a generation batch into micro-batches. by_prompt: a prompt's completions together, each
    # distinct prompt run once for all of them (grpo/shared_prompts.py), shortest completions first; by_length where
    # that does not apply. by_length: rows of similar completion length together. Both drop the padding all a
    # micro-batch's rows share and keep the step's gradient (where grpo/micro_batches.py finds it unchanged; TRL's
    # random cut elsewhere). random: TRL's random cut, padded to the generation batch's longest completion.
    micro_batches: Literal["by_prompt", "by_length", "random"] = "by_prompt"
    seed: int = 42
    output_dir: str = "runs/train"
    # CPU threads for torch per process. None: picked at the start, the cores other jobs leave idle (at most torch's
    # default; torch's default on a GPU), and the run log's `threads:` line says what (runtime/devices.py). On cores
    # shared with other jobs, threads of a small model wait on each other (docs/figures.md, "torch threads").
    torch_threads: int | None = None
    # glibc's mmap threshold on a CPU run, held fixed (runtime/host_memory.py): tensors above it are unmapped when
    # freed, so the process's resident memory follows what it holds (the memory plan) rather than what it once held.
    # 0 (default): glibc's own (the threshold grows to 32 MiB and the heap keeps what was freed). A held threshold
    # (1048576: 1 MiB) lowers the peak for a slower step (docs/results.md, Mem3). A CPU plan counts
    # the heap's copy of a LoRA policy's freed activations unless this is set.
    host_mmap_threshold: int = 0
    # signals that end the run cleanly after the current step (checkpoint written, exit status 75); [] to disable
    preempt_signals: list[str] = field(default_factory=lambda: ["SIGTERM", "SIGUSR1"])
    # log kl/from_init, the policy's KL from its initial weights, every step (the report's overoptimization
    # curves). π_init is TRL's reference when grpo.beta > 0 (it is the initial policy), else a frozen copy of the
    # initial policy (one more copy of its weights in memory); what each step pays: kl_from_init_estimator
    kl_from_init: bool = True
    # how kl/from_init is measured (grpo/kl_from_init.py). exact: Σ_v π(v|y_<t) log(π/π_init) at each completion
    # token, over the whole vocabulary (chunked, bounded memory): steadier from step to step than k3, for one no-grad
    # forward of the policy and one of π_init per step; k3 beside it as kl/from_init_k3. k3: exp(r) − r − 1 of the
    # sampled tokens only (one forward of π_init, none with TRL's reference; much noisier)
    kl_from_init_estimator: Literal["exact", "k3"] = "exact"
    # the overoptimization guard: an alarm where verified accuracy turns down while the reward holds (optionally
    # stopping the run), and best/ beside final/ (grpo/guard.py)
    guard: GuardSettings = field(default_factory=GuardSettings)

    @classmethod
    def migrate_keys(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A config of an older coreward with its moved keys where they are now (`build` calls this first)."""
        return move_method_data_keys(data)

    def validate(self) -> None:
        from coreward.grpo.preemption import signal_numbers

        try:
            signal_numbers(self.preempt_signals)
        except ValueError as err:
            raise CorewardError(f"key preempt_signals: {err}") from None
        validate_rewards(self.rewards, self.data)
        validate_grpo_keys(self.grpo)
        validate_grpo_values(self.grpo)
        validate_verifier(self.verifier)
        validate_data(self.data)
        for problem in self.guard.validate():
            raise CorewardError(f"key {problem}")
        if self.lora.enabled:
            validate_lora(self.lora)
        if not 0 <= self.host_mmap_threshold <= 32 << 20:
            raise CorewardError(f"key host_mmap_threshold must be 0 (glibc's default) or a size in bytes up to "
                                f"33554432 (32 MiB), got {self.host_mmap_threshold}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise CorewardError(f"key torch_threads must be >= 1 (or null: picked from the idle cores), got {self.torch_threads}")
        needs = declared_needs(self.rewards)
        validate_batch(self.grpo, paired=declared(needs, "rephrasings") is not None)
        declared(needs, "teacher_rephrasings")  # two different ones are refused
        for key, source_needs in needs:
            if source_needs.loss_per_view and self.grpo.get("loss_type") != "bnpo":
                raise CorewardError(f"key {key}: a loss per view sums per-view token means of the micro-batch, as "
                                    f"verl's token-mean does: set grpo.loss_type: bnpo (got {self.grpo.get('loss_type')!r})")


def weights_dtype(model, lora: bool = False) -> str:
    """The dtype TRL loads the policy's weights in: float32 whatever it computes in (AdamW's steps at the papers'
    learning rates round away on bf16 weights: runtime/precision.py), unless `model.master_weights: none` asks for
    the optimizer to step `model.dtype`'s weights themselves.

    Per engine, the weights the optimizer updates are then float32: one process and DDP hold float32 parameters
    and compute through accelerate's autocast (verl's way: fp32 actor, bf16 compute); FSDP2 shards float32
    parameters and casts each unit to bf16 for compute (accelerate's MixedPrecisionPolicy, and it upcasts
    low-precision parameters itself); DeepSpeed ZeRO casts the module to bf16 and keeps float32 master
    partitions (its bf16 optimizer), and the final model is written from those masters (trainer.save_model).

    With LoRA the base weights are frozen and load in `model.dtype` (half the memory of float32); what AdamW
    updates is the adapters, which PEFT creates in float32 over a bf16 base (its `autocast_adapter_dtype`)."""
    if lora and model.dtype != "auto":
        return model.dtype
    return "float32" if model.master_weights == "float32" else model.dtype


def as_train_config(config: Any, overrides: list[str] | None = None) -> TrainConfig:
    """The one settings object of a training job, from what `coreward train` (a YAML path) and `coreward.train` (a
    `TrainConfig`, a mapping with the YAML's keys, or a YAML path) are given, with `--set` items applied."""
    import copy
    from pathlib import Path

    from coreward.runtime.config import apply_overrides, build, load_config, to_dict

    if config is None or isinstance(config, (str, Path)):  # None: the defaults
        return load_config(TrainConfig, config, overrides)
    if isinstance(config, dict):
        return build(TrainConfig, apply_overrides(copy.deepcopy(config), overrides))
    if overrides:
        return build(TrainConfig, apply_overrides(to_dict(config), overrides))
    return config


def validate_rewards(rewards: list[RewardSpec], data: DataSettings | None = None) -> None:
    """Every reward names a known source, its parameters pass that source's `Params`, and the source accepts the
    data settings (`RewardSource.check_data`): before any model loads."""
    from coreward.rewards import source_class

    if not rewards:
        raise CorewardError("key rewards must list at least one reward source")
    for i, spec in enumerate(rewards):
        if ":" in spec.name:
            working_directory_importable()
        try:
            cls = source_class(spec.name, key=f"rewards.{i}.name")
        except CorewardError as err:
            if "No module named" not in str(err):
                raise
            raise CorewardError(f"{err} (looked in the working directory {os.getcwd()} and on PYTHONPATH: run from "
                                "the folder that holds the package, or add that folder to PYTHONPATH)") from None
        params = spec.parsed_params(f"rewards.{i}")
        try:
            cls.check_data(params, data if data is not None else DataSettings())
        except ValueError as err:  # its message starts with the parameter's name
            raise CorewardError(f"reward {spec.name!r}: key rewards.{i}.params.{err}") from None


def declared_needs(rewards: list[RewardSpec]) -> list[tuple[str, Any]]:
    """(`rewards.N.params`, its `DataNeeds`) of each configured reward: what its parameters ask of the training data
    and of the loss (`RewardSource.data_needs`)."""
    from coreward.rewards import source_class

    return [(f"rewards.{i}.params",
             source_class(spec.name, key=f"rewards.{i}.name").data_needs(spec.parsed_params(f"rewards.{i}")))
            for i, spec in enumerate(rewards)]


def declared(needs: list[tuple[str, Any]], need: str) -> tuple[Any, str] | None:
    """The value of `need` (a `DataNeeds` field) that the configured rewards' `needs` (`declared_needs`) declare, with
    the key that declares it (`rewards.N.params.<need>`); None when none does. Two different values are refused."""
    found = None
    for key, source_needs in needs:
        value = getattr(source_needs, need)
        if not value:
            continue
        if found is not None and found[0] != value:
            raise CorewardError(f"key {key}.{need}: {value!r}, while {found[1]} is {found[0]!r}: the training data "
                                "has one of each")
        found = found or (value, f"{key}.{need}")
    return found


# data keys that moved into the parameters of the methods that use them (`rewards.N.params.<same name>`), with the
# value that meant "not used"
MOVED_DATA_KEYS = {"rephrasings": None, "view_loss": "joint", "teacher_rephrasings": None}


def move_method_data_keys(data: dict[str, Any], warn: bool = True) -> dict[str, Any]:
    """`data.<key>` of MOVED_DATA_KEYS given as `rewards.N.params.<key>` of every configured reward whose parameters
    have that field (one warning line each, unless `warn` is false); a value that meant "not used" is dropped. A key
    no configured reward takes is refused, naming the methods that do."""
    from coreward.rewards import registered_sources, source_class

    section = data.get("data")
    moved = [k for k in MOVED_DATA_KEYS if isinstance(section, dict) and k in section]
    if not moved:
        return data
    data = {**data, "data": dict(section)}
    rewards = data["rewards"] if "rewards" in data else [{"name": spec.name} for spec in default_rewards()]
    if isinstance(rewards, list):
        rewards = data["rewards"] = [dict(spec) if isinstance(spec, dict) else spec for spec in rewards]
    for name in moved:
        value = data["data"].pop(name)
        if value == MOVED_DATA_KEYS[name]:
            continue
        takers = []
        for i, spec in enumerate(rewards if isinstance(rewards, list) else []):
            try:
                if ":" in str(spec["name"]):
                    working_directory_importable()
                cls = source_class(str(spec["name"]))
            except (CorewardError, KeyError, TypeError):
                continue  # a bad entry is reported by the config's own checks
            if name in {f.name for f in dataclasses.fields(cls.Params)} and isinstance(spec.get("params") or {}, dict):
                params = spec["params"] = dict(spec.get("params") or {})
                params.setdefault(name, value)
                takers.append(f"rewards.{i}.params.{name}")
        if not takers:
            owners = sorted(n for n, c in registered_sources().items() if name in {f.name for f in dataclasses.fields(c.Params)})
            raise CorewardError(f"key data.{name}: moved to rewards.N.params.{name} of the method that uses it "
                                f"({', '.join(owners)}), and no configured reward takes it")
        if warn:
            print_once(f"warning: data.{name} is deprecated: set {', '.join(takers)} instead (mapped there for this run)")
    return data


def working_directory_importable() -> None:
    """Put the working directory on `sys.path`, so that `rewards: - name: mypkg.rewards:f` finds `./mypkg` as
    `python -m` and TRL's command line do. Every process of a launch loads the config, so each one can import it.
    Appended, after the installed packages: a local folder never shadows a library."""
    import sys

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())


# ---------------------------------------------------------------------------------------------- the batch
# Every check of the batch's shape is here: at config load (`validate_batch`, the generation batch from the
# settings and WORLD_SIZE) and once the data is read (`check_batch_fits`, from TRL's resolved GRPOConfig).


def default_num_generations() -> int:
    """TRL's own default of grpo.num_generations (one spelling: GRPOConfig's)."""
    from trl import GRPOConfig

    return GRPOConfig.__dataclass_fields__["num_generations"].default


def validate_batch(grpo: dict[str, Any], paired: bool = False) -> None:
    """A group holds at least 2 completions, the generation batch whole groups (and, with `paired` views, an even
    number of prompts)."""
    G = grpo.get("num_generations", default_num_generations())
    if G is not None and G < 2:
        raise CorewardError(
            f"key grpo.num_generations must be at least 2 (GRPO normalizes rewards within a group), got {G}"
        )
    batch = grpo.get("per_device_train_batch_size")
    gen_batch = grpo.get("generation_batch_size")
    steps = grpo.get("steps_per_generation") or grpo.get("gradient_accumulation_steps") or 1
    # the generation batch is global: every process's share together (torchrun / accelerate set WORLD_SIZE)
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    total = gen_batch if gen_batch is not None else (batch * processes * steps if batch is not None else None)
    if total is not None and G and total % G != 0:
        raise CorewardError(
            f"the generation batch ({total} completions: grpo.per_device_train_batch_size × {processes} "
            f"process(es) × steps_per_generation) must be a multiple of grpo.num_generations ({G})"
        )
    if paired and total is not None and G and (total // G) % 2:
        raise CorewardError(
            f"paired views put each question beside its rephrasing: the generation batch ({total} "
            f"completions) must hold an even number of prompts, i.e. be a multiple of 2 × num_generations"
        )


def check_batch_fits(rows: int, args, where: str) -> None:
    """One optimizer step samples `generation_batch_size / num_generations` prompts: the data must hold them,
    or TRL's sampler yields no batch at all and the run ends at step 0 without a word."""
    prompts = args.generation_batch_size // args.num_generations
    if rows < prompts:
        raise CorewardError(
            f"key data.train: {rows} prompts {where}, but one step samples {prompts} (grpo.per_device_train_batch_size "
            f"× processes × steps_per_generation ÷ grpo.num_generations): use more data (data.limit) or a smaller batch"
        )


_COLUMN_FIELDS = ("question", "answer", "id", "solution")


def validate_data(data: DataSettings) -> None:
    for key in ("columns", "eval_columns"):
        for name, column in getattr(data, key).items():
            if name not in _COLUMN_FIELDS:
                raise CorewardError(f"key data.{key}.{name}: not a mappable field (one of {', '.join(_COLUMN_FIELDS)})")
            if not isinstance(column, str) or not column:
                raise CorewardError(f"key data.{key}.{name} must be a column name, got {column!r}")
    for key in ("limit", "eval_limit"):
        value = getattr(data, key)
        if value is not None and value < 1:
            raise CorewardError(f"key data.{key} must be >= 1 (or null: every problem), got {value}")
    if data.max_prompt_tokens is not None and data.max_prompt_tokens < 1:
        raise CorewardError(f"key data.max_prompt_tokens must be >= 1 (or null: no limit), got {data.max_prompt_tokens}")
    if data.eval_every < 0:
        raise CorewardError(f"key data.eval_every must be >= 0 (0: never), got {data.eval_every}")
    if data.eval_n < 1:
        raise CorewardError(f"key data.eval_n must be >= 1, got {data.eval_n}")
    if not data.eval_temperature >= 0:
        raise CorewardError(f"key data.eval_temperature must be >= 0, got {data.eval_temperature}")


def validate_lora(lora: LoraSettings) -> None:
    if lora.r < 1:
        raise CorewardError(f"key lora.r must be >= 1, got {lora.r}")
    if not lora.alpha > 0:
        raise CorewardError(f"key lora.alpha must be > 0, got {lora.alpha}")
    if not 0 <= lora.dropout < 1:
        raise CorewardError(f"key lora.dropout must be in [0, 1), got {lora.dropout}")


# grpo values TRL accepts but that cannot work: (key, lowest allowed, inclusive)
_GRPO_BOUNDS = [
    ("per_device_train_batch_size", 1, True), ("gradient_accumulation_steps", 1, True),
    ("steps_per_generation", 1, True), ("generation_batch_size", 1, True), ("num_iterations", 1, True),
    ("max_completion_length", 1, True), ("learning_rate", 0, True), ("beta", 0, True), ("temperature", 0, False),
    ("save_total_limit", 1, True),
]


def validate_grpo_values(grpo: dict[str, Any]) -> None:
    for key, low, inclusive in _GRPO_BOUNDS:
        value = grpo.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value < low or (value == low and not inclusive) or value != value:
                raise CorewardError(f"key grpo.{key} must be {'>=' if inclusive else '>'} {low}, got {value}")


def validate_verifier(verifier: VerifierSettings) -> None:
    from coreward.verify.equivalence import check_settings

    try:
        check_settings(verifier.timeout_s, verifier.num_workers, verifier.max_completion_chars)
    except ValueError as err:  # its message starts with the setting's name
        raise CorewardError(f"key verifier.{err}") from None


_SCALARS = (int, float, bool, str)


def validate_grpo_keys(grpo: dict[str, Any]) -> None:
    """Check `grpo:` keys against trl.GRPOConfig's fields, and scalar values against their types."""
    from trl import GRPOConfig

    from coreward.grpo.compat import NAMES as CHECKPOINTING_NAMES

    for key, value in grpo.items():  # before the general check: a value coreward can't honour is its own error
        if key in _FIXED and value != _FIXED[key][0]:
            raise CorewardError(f"key grpo.{key}: coreward needs {_FIXED[key][0]!r} ({_FIXED[key][1]})")
    check_args_keys(GRPOConfig, grpo, "grpo", _MANAGED, aliases=tuple(CHECKPOINTING_NAMES))


# GRPOConfig fields that coreward derives from its own keys
_MANAGED = {
    "output_dir": "output_dir (or --output-dir)",
    "seed": "seed",
    "reward_weights": "rewards.N.weight",
    # TRL's push uploads checkpoints as they come, without the card or the models the sources learnt (and offline it
    # fails mid-run with a traceback): publish a finished run instead
    "push_to_hub": "`coreward push RUN_DIR --repo ...` after training (the policy with its card, the models its reward sources learnt)",
}

# GRPOConfig fields coreward must hold at one value: any other is refused, never silently overridden
_FIXED = {
    "remove_unused_columns": (False, "reward sources read every dataset column: the reference, ids, pair ids"),
}

# coreward's own default for a GRPOConfig field it reads itself (save_total_limit: complete checkpoints
# kept by coreward's rotation; null keeps every one, as in transformers)
DEFAULT_SAVE_TOTAL_LIMIT = 2
