"""What every reward method implements, the global batch it receives, and the policy it may ask things of.

TRL calls reward functions with only its own process's slice of the generation batch, so a prompt's
group of G completions can be split across processes (trl issue #3896). coreward's engine gathers
first and hands each `RewardSource` the *whole* batch: every completion of every group, once, on every
process. A source returns one reward per completion of that global batch; the engine gives TRL back
each process's slice. Because every process sees the same inputs, a source that keeps state (a reward
model, an EMA teacher) stays identical on all processes as long as its update is deterministic.

Writing a method (see `majority.py` for a stateless one, `co_rewarding_2/` for one that owns a model):

    @register("my_reward")
    class MyReward(RewardSource):
        @dataclass
        class Params:
            scale: float = 1.0  # one line saying what it does

        def compute(self, batch: RolloutBatch) -> list[float]:
            return [self.params.scale * len(c) for c in batch.completions]

Parameters come from the config's `rewards: [{name, params}]`; `Params` is checked field by field (type,
unknown keys, its own `validate()`), and an error names the bad key. A source that needs the policy
(its device, its weights, to sample from a model) gets `batch.policy` and `on_step_begin(policy)`: the
`Policy` interface below, which the engine implements. No source touches the trainer. A source that holds a model
on the training device says what, and when, in `memory_needs` (rewards/memory.py), for the memory plan; what it
watches in its own metrics in `health_watches` (rewards/health.py); its step's cost in `step_cost`.
"""

from __future__ import annotations

import dataclasses
import math
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol, Sequence

from coreward.rewards.health import HealthWatch
from coreward.rewards.memory import MemoryNeeds, PlannedRun
from coreward.runtime.errors import CorewardError


class Policy(Protocol):
    """What a reward source may ask of the policy being trained (implemented by `coreward.grpo.policy`)."""

    device: Any  # torch.device the policy (and the batch's tensors) live on
    step: int  # optimizer steps taken so far (0 before the first)
    max_steps: int  # the run's total optimizer steps
    rank: int  # this process's index; 0 is the main process
    world_size: int  # number of processes
    tokenizer: Any  # the policy's tokenizer (pad token set, left padding)
    kl_beta: float  # weight of the KL penalty; 0: no reference model is kept
    syncs_reference: bool  # whether the engine itself moves the reference (TRL's sync_ref_model)
    is_sharded: bool  # parameters are split across processes (DeepSpeed ZeRO-3 or FSDP)
    is_zero3: bool  # DeepSpeed ZeRO-3 in particular (partitioned parameters must be gathered to read)
    is_peft: bool  # the policy is a PEFT (LoRA) model: only its adapter trains
    max_completion_length: int  # the length limit of rollouts

    def tokenize_prompt(self, prompt: Any) -> list[int]:
        """Token ids of a dataset prompt (text, or chat messages) as the engine tokenizes the policy's prompts."""

    def module(self) -> Any:
        """The policy's model, unwrapped from any distributed wrapper."""

    def reference(self) -> Any | None:
        """The KL reference model, unwrapped (None when `kl_beta` is 0, or the policy is PEFT: its reference
        is the base model with the adapter off)."""

    def gathered(self, tensors: Sequence[Any], modifier_rank: int | None = None) -> AbstractContextManager:
        """Full values of ZeRO-3 partitioned `tensors` for the block (with `modifier_rank`, that process's
        changes are written back to every shard); a no-op elsewhere."""

    def generate(self, model: Any, prompt_ids: list[list[int]], num_generations: int, temperature: float,
                 adapter: str | None = None) -> list[list[str]]:
        """`num_generations` sampled completions (text) for each prompt from `model` (the policy's architecture:
        the policy itself, a copy, the reference; `adapter` selects a PEFT adapter), with the policy's
        sampling settings (top-p, top-k, length, stop tokens) but `temperature`. Called on one process's share."""

    def map_shards(self, fn: Callable[[list], list], items: Sequence[Any]) -> list:
        """`fn` applied to this process's contiguous share of `items`; every process gets every result, in order."""


@dataclass
class Rollouts:
    """What a reward reads: all rollouts of one generation step, across every process, in group order.

    Rows `g*G .. g*G+G-1` are the G completions of prompt group `g` (`group_ids[i] == i // G`).
    `columns` holds every dataset column (`answer`, `id`, `pair_id`, ...), one value per completion.
    """

    prompts: list[Any]
    completions: list[str]
    completion_ids: list[list[int]]
    group_ids: list[int]
    num_generations: int
    columns: dict[str, list[Any]]
    step: int = 0
    reference_column: str = "answer"
    prompt_ids: list[list[int]] = field(default_factory=list)  # the policy's tokens of each row's prompt
    # Per-completion statistics of the policy's own logits (mean entropy, self-certainty), filled by
    # the engine only when a configured source lists them in `needs_token_stats`.
    token_stats: dict[str, list[float]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.completions)

    @property
    def references(self) -> list[str | None] | None:
        """Reference answers when the dataset has them (self-supervised methods must not use them)."""
        refs = self.columns.get(self.reference_column)
        if refs is None or all(r is None or r == "" for r in refs):
            return None
        return [None if r is None or r == "" else str(r) for r in refs]

    def groups(self) -> list[range]:
        """Row ranges of each prompt group."""
        G = self.num_generations
        return [range(start, start + G) for start in range(0, len(self), G)]

    def require_columns(self, source: str, *columns: str) -> list[list[Any]]:
        """The named columns (`"reference"` means the reference column), or an error naming what is missing."""
        found = []
        for column in columns:
            values = self.references if column == "reference" else self.columns.get(column)
            if values is None:
                name = self.reference_column if column == "reference" else column
                raise CorewardError(f"reward {source!r} needs the dataset column {name!r}, which is missing or empty")
            found.append(values)
        return found


@dataclass
class RolloutBatch(Rollouts):
    """The `Rollouts` a reward reads, with what it may call: the verifier (and the verdicts and answers it
    computes once per batch, shared by every source), the policy, and the metrics sink `log`."""

    # Shared services: "verifier" (the rule verifier), "mode" ("train" or "eval").
    context: dict[str, Any] = field(default_factory=dict)
    policy: Policy | None = None  # the policy being trained (None in a batch built by hand)
    metrics: dict[str, float] = field(default_factory=dict)  # what `log` recorded, read by the engine
    # answers and verdicts computed once per batch, whichever source asks first
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def mode(self) -> str:
        """"train" for the rollouts the policy learns from, "eval" for evaluation batches."""
        return self.context.get("mode", "train")

    @property
    def verifier(self) -> Any:
        return self.context["verifier"]

    def map_shards(self, fn: Callable[[list], list], items: Sequence[Any]) -> list:
        """`fn` over the items, split across the policy's processes (`Policy.map_shards`); every process gets every
        result, in order. In a batch built by hand (no policy, or a stand-in without `map_shards`): `fn(items)`."""
        map_shards = getattr(self.policy, "map_shards", None)
        return map_shards(fn, items) if map_shards is not None else list(fn(list(items)))

    def verdicts(self):
        """Rule verification of every completion against its reference (computed once per batch).

        Returns a list of `VerifyResult` (`correct`, `extracted`, `timed_out`), or None without references.
        With several processes each verifies its contiguous share and the verdicts are gathered (every
        process must call this, as every process runs the same sources on the same batch).
        """
        refs = self.references
        if refs is None:
            return None
        if "verdicts" not in self._cache:
            def verify(share):
                return self.verifier.verify_completions([c for c, _ in share], [r for _, r in share])

            self._cache["verdicts"] = self.map_shards(verify, list(zip(self.completions, [r or "" for r in refs])))
        return self._cache["verdicts"]

    def extracted_answers(self, how: str = "default") -> list[str | None]:
        """The final answer extracted from each completion (no reference needed); `how="boxed_raw"`: the
        Co-rewarding authors' raw last-`\\boxed{}` strings (`verify.extract.extract_boxed_raw`)."""
        if how == "boxed_raw":
            from coreward.verify.extract import extract_boxed_raw

            return self._cache.setdefault("boxed_raw", [extract_boxed_raw(c) for c in self.completions])
        if "verdicts" in self._cache:
            return [v.extracted for v in self._cache["verdicts"]]
        if "extracted" not in self._cache:
            from coreward.verify import extract_answer

            self._cache["extracted"] = self.map_shards(lambda share: [extract_answer(c) for c in share],
                                                       self.completions)
        return self._cache["extracted"]

    def log(self, name: str, value: float | None) -> None:
        """Record a scalar metric for this step (logged as `name` in metrics.jsonl)."""
        if value is not None and math.isfinite(value):
            self.metrics[name] = float(value)


@dataclass
class NoParams:
    """A method without parameters."""


@dataclass(frozen=True)
class DataNeeds:
    """What a source's parameters ask of the training data and of the loss (`RewardSource.data_needs`). The engine
    builds the dataset and the loss from what the configured sources declare, and names no method. A source fills a
    field from its parameter of the same name, so that an error about it names `rewards.N.params.<field>`."""

    rephrasings: str | None = None  # paired views: each question is rolled out beside its rephrasing from this source ("demo", "arith" or a file); rows carry `pair_id` and `view`
    loss_per_view: bool = False  # each view's loss a token mean over its own tokens, the views' losses summed (needs `rephrasings` and grpo.loss_type bnpo)
    teacher_rephrasings: str | None = None  # each question's rephrasing from this source, rendered like the prompt into a `teacher_prompt` column


class RewardSource:
    """Base class of a reward method: set `Params` (a dataclass) and implement `compute`."""

    name: ClassVar[str] = "reward"
    Params: ClassVar[type] = NoParams
    params: Any = None  # the parsed `Params` (set by `__init__`)
    config_key: str = "rewards"  # its entry in a config ("rewards.0", set by `build_source`), for errors that name a key
    #: token statistics of the policy's logits this source needs (see `grpo/token_stats.py`)
    needs_token_stats: ClassVar[tuple[str, ...]] = ()
    #: whether its rewards come from the reference answers (then each must be usable: checked before training)
    needs_references: ClassVar[bool] = False
    #: the method's name in tables (`coreward demo`); empty: its config name, capitalized
    label: ClassVar[str] = ""
    #: its row in the demo's tables: reference-based methods first (the Cooper paper's order), each part by this
    table_order: ClassVar[int] = 100
    #: a step's time relative to the rule reward's, so that runs side by side start longest first (`coreward demo`,
    #: `coreward map`); the built-in methods' are measured on the demo (docs/figures.md), 1 where unmeasured
    step_cost: ClassVar[float] = 1.0
    #: the models `export_models` writes, by folder name: (what it is, how to load it: PATH stands for the folder),
    #: for the run's model card and `coreward push`
    exports: ClassVar[dict[str, tuple[str, str]]] = {}
    #: the reward a config without `rewards:` trains with (`coreward.rewards.default_method`): one method sets it
    default: ClassVar[bool] = False
    #: its reward is the verifier's own verdict on the reference answer (the gold reward), so other rewards are
    #: measured against it: `coreward map`'s reference row (`coreward.rewards.reference_method`): one method sets it
    ground_truth: ClassVar[bool] = False
    #: whether `coreward demo` runs it (it has a `configs/demo/<name>.yaml`); False for a method that needs an external
    #: model the CPU demo has not (an LLM judge)
    in_demo: ClassVar[bool] = True

    def __init__(self, **params: Any):
        """`params` by keyword, parsed here (`parse_params`); a source built by `from_params` keeps the Params it
        was given."""
        given = _GIVEN_PARAMS.get()
        if given is not None:
            _GIVEN_PARAMS.set(None)  # for this source only (`from_params` restores the previous value)
            if params:
                raise TypeError(f"{type(self).__name__}: parameters given both parsed and by keyword")
            self.params = given
        else:
            self.params = parse_params(type(self), params)

    @classmethod
    def from_params(cls, params: Any) -> RewardSource:
        """A source of already-parsed `params` (the `cls.Params` that `parse_params` returned): not parsed again,
        whatever `__init__` a subclass writes (it calls `super().__init__(**params)` with no keywords)."""
        if not isinstance(params, cls.Params):
            raise TypeError(f"{cls.__name__}.from_params takes a {cls.__name__}.Params, got {type(params).__name__}")
        token = _GIVEN_PARAMS.set(params)
        try:
            return cls()
        finally:
            _GIVEN_PARAMS.reset(token)

    @classmethod
    def check_data(cls, params: Any, data: Any) -> None:
        """Refuse, before any model loads, data settings (`TrainConfig.data`) these parsed `params` can't work
        with: raise ValueError with a message that starts with the parameter's name."""

    @classmethod
    def data_needs(cls, params: Any) -> DataNeeds:
        """What these parsed `params` ask of the training data and of the loss (paired views, a loss per view,
        teacher prompts): asked at config load, by the dataset builder and by the trainer."""
        return DataNeeds()

    @classmethod
    def memory_needs(cls, params: Any, run: PlannedRun) -> MemoryNeeds:
        """What these parsed `params` hold on each training device, and when: a `rewards.memory.MemoryNeeds` of
        items (a model's weights, its optimizer state, the activations of its passes, a teacher copy), each held
        through the phases of the step it names, given `run` (`rewards.memory.PlannedRun`: the device, the engine,
        the policy's shape and batch). The memory plan (`coreward plan`, and `coreward train` before it loads) sums
        them. Default: nothing (a source that holds no model); a source that loads one must declare it, or the plan
        misses it."""
        return MemoryNeeds()

    @property
    def needs(self) -> DataNeeds:
        """`data_needs` of this source's own parameters."""
        return type(self).data_needs(self.params)

    def compute(self, batch: RolloutBatch) -> list[float]:
        """One reward per completion of the global batch (None: not applicable to that completion)."""
        raise NotImplementedError

    def preflight(self) -> None:
        """Check, once before any model loads, every external part this source needs (an endpoint answers, a
        model path exists); raise CorewardError naming what and why. A run that cannot be what its config says
        stops here (exit 2) instead of training as something else."""

    def on_step_begin(self, policy: Policy) -> None:
        """Called once per training step, before its rollouts (an EMA teacher updates here)."""

    def health_watches(self) -> list[HealthWatch]:
        """What this source watches in the metrics it logs (`rewards.health.HealthWatch`): its invariants, warned
        about while the run trains, and its counters and summary lines in health.json. Default: none."""
        return []

    def engine_models(self, policy: Policy) -> dict[str, Any]:
        """The models this source trains on the policy's processes, by name, for the engine line printed at start (how
        much of each the engine partitions). Default: none."""
        return {}

    def moves_reference(self) -> bool:
        """Whether this source changes the engine's KL reference model during the run (an EMA teacher kept in it):
        then the reference is no longer the initial policy, and what measures the KL from it needs a copy."""
        return False

    def save_state(self, directory: Path) -> None:
        """Write this source's state (models, optimizers, counters) into a checkpoint directory. Called on every
        process (sharded state is gathered collectively); files are written by the main process only."""

    def load_state(self, directory: Path) -> None:
        """Restore what `save_state` wrote."""

    def export_models(self, directory: Path) -> dict[str, Path]:
        """Called once on the final model's state directory, after `save_state`: write the models this source
        learnt as folders `from_pretrained` loads (if `save_state` has not) and return them by name."""
        return {}

    def close(self) -> None:
        """Release resources (pools, connections)."""


class ParamsError(CorewardError):
    """A reward's parameters are refused (the message names the key and the reward)."""


#: the parsed Params `RewardSource.from_params` hands to the constructor it calls
_GIVEN_PARAMS: ContextVar[Any] = ContextVar("given_params", default=None)


def parse_params(cls: type[RewardSource], params: dict[str, Any], key: str = "params") -> Any:
    """`cls.Params` from a mapping, the one place a source's parameters are checked: unknown keys, wrong types
    (YAML's `1e-5` is a string: converted) and the Params' own `validate()` are a `ParamsError` that names the
    reward and `key.<field>`: "reward 'cooper': key rewards.0.params.lr must be > 0, got 0"."""
    from coreward.runtime.config import build

    if not dataclasses.is_dataclass(cls.Params):
        raise TypeError(f"{cls.__name__}.Params must be a dataclass")
    where = f"reward {cls.name!r}"
    try:
        return build(cls.Params, dict(params), key=key, where=where)
    except ParamsError:
        raise
    except CorewardError as err:  # build's own: "<where>: key <key>.<field> ..."
        raise ParamsError(str(err)) from None
    except ValueError as err:  # raised by Params.validate(), whose messages start with the field's name
        raise ParamsError(f"{where}: key {key}.{err}") from None
    except TypeError as err:
        raise ParamsError(f"{where}: key {key}: {err}") from None


def param_docs(cls: type[RewardSource]) -> dict[str, str]:
    """Each parameter's one-line description (the comment beside its field, in the class that declares it: Params
    may extend a settings dataclass declared elsewhere), for help texts and docs."""
    import inspect
    import re

    docs = {}
    for declaring in reversed(cls.Params.__mro__):
        if not dataclasses.is_dataclass(declaring):
            continue
        try:
            source = inspect.getsource(declaring)
        except (OSError, TypeError):
            continue
        for line in source.splitlines():
            match = re.match(r"\s+(\w+)\s*:[^#]*#\s*(.+)$", line)
            if match:
                docs[match.group(1)] = match.group(2).strip()
    return docs


#: name -> class of every registered reward source
_REGISTRY: dict[str, type[RewardSource]] = {}


def register(name: str) -> Callable[[type[RewardSource]], type[RewardSource]]:
    """Class decorator: make a source available to configs as `rewards: [{name: <name>}]`."""

    def decorator(cls: type[RewardSource]) -> type[RewardSource]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def registered() -> dict[str, type[RewardSource]]:
    """The sources registered so far (importing `coreward.rewards` registers the built-in ones)."""
    return dict(_REGISTRY)


def label_of(cls: type[RewardSource]) -> str:
    """How tables name a method."""
    return cls.label or cls.name.replace("_", " ").capitalize()
