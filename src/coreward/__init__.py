"""coreward: RL for LLM reasoning with co-optimized and co-derived rewards.

The Python API (names load on first use, so `import coreward` and `coreward --help` stay fast):

    import coreward
    result = coreward.train({"data": {"train": "my.jsonl"}, "rewards": [{"name": "majority"}]}, max_steps=10)
    coreward.evaluate(result.final_model, benchmarks=["gsm8k"], n=8)

    @coreward.register("my_reward")
    class MyReward(coreward.RewardSource): ...      # see coreward.rewards.base
"""

from __future__ import annotations

import importlib
from typing import Any


__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "TrainConfig": "coreward.grpo.config",
    "TrainResult": "coreward.grpo.train",
    "load_config": "coreward.runtime.config",
    "RewardSource": "coreward.rewards.base",
    "RolloutBatch": "coreward.rewards.base",
    "Policy": "coreward.rewards.base",
    "register": "coreward.rewards.base",
    "FunctionReward": "coreward.rewards.function",
    "as_trl_reward_func": "coreward.grpo.trl_reward",
    "Verifier": "coreward.verify",
    "evaluate": "coreward.evaluation.evaluate",
    "EvalSettings": "coreward.evaluation.evaluate",
    "Record": "coreward.data.records",
    "CorewardError": "coreward.runtime.errors",
}

__all__ = sorted([*_EXPORTS, "train", "load_data", "__version__"])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        _quiet()
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'coreward' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__


def train(config: Any, *, overrides: list[str] | None = None, output_dir: str | None = None,
          max_steps: int | None = None, resume: bool | str = False, allow_config_change: bool = False,
          plan_check: bool = True):
    """`coreward train` from Python. `config` is a `TrainConfig`, a mapping with the YAML's keys, or a YAML
    path; `overrides` are `--set` items (`"grpo.learning_rate=1e-6"`); `resume=True` is `--resume` (a complete
    checkpoint must be there), `resume="if_any"` is `--resume-if-any`; `plan_check=False` is `--no-plan-check`.
    Returns a `TrainResult`."""
    _quiet()
    from coreward.grpo.config import as_train_config
    from coreward.grpo.train import run_training

    return run_training(as_train_config(config, overrides), output_dir=output_dir, max_steps=max_steps, resume=resume,
                        allow_config_change=allow_config_change, plan_check=plan_check)


def _quiet() -> None:
    """Before the first heavy import: DeepSpeed's "Setting accelerator to CPU" and TRL's FutureWarning, as the
    command line silences them (not the user's logging or progress bars)."""
    from coreward.runtime.quiet import quiet_libraries

    quiet_libraries(command_line=False)


def load_data(source: str, split: str = "train", *, columns: dict[str, str] | None = None, limit: int | None = None,
              data_dir: str | None = None):
    """Records (`coreward.Record`) of a benchmark, file, directory or hub dataset id, as `data.train` reads them."""
    from coreward.data.sources import load_named

    return load_named(source, split, limit, data_dir, key="source", columns=columns)
