"""Reward sources: one module per method, or a subpackage where a method has more than one file (cooper/,
co_rewarding_2/), beside what every method shares (base.py, memory.py, health.py, voting.py, ensemble.py).
Importing this package registers every built-in method under its config name; `source_class` also loads a user's
source by import path (`mypkg.rewards:MyReward`)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from coreward.rewards.base import (
    DataNeeds,
    NoParams,
    ParamsError,
    Policy,
    RewardSource,
    RolloutBatch,
    Rollouts,
    parse_params,
    register,
    registered,
)
from coreward.runtime.errors import CorewardError


__all__ = ["DataNeeds", "NoParams", "Policy", "RewardSource", "RolloutBatch", "Rollouts", "build_source", "builtin_methods",
           "default_method", "parse_params", "reference_method", "register", "registered_sources", "source_class"]


def _register_builtin_methods() -> None:
    """Import every module and subpackage of this package: each method's module registers itself (`@register`; a
    subpackage imports its reward module), so a new built-in method is its own files alone."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


_register_builtin_methods()


def registered_sources() -> dict[str, type[RewardSource]]:
    """Every registered method by config name."""
    return registered()


def builtin_methods() -> list[type[RewardSource]]:
    """The built-in methods in the order of the Cooper paper's table: reference-based ones first, then the
    co-optimized / co-derived rewards (each part by the methods' `table_order`)."""
    built_in = [cls for cls in registered().values() if cls.__module__.startswith("coreward.rewards.")]
    return sorted(built_in, key=lambda cls: (not cls.needs_references, cls.table_order, cls.name))


def marked_method(flag: str) -> type[RewardSource]:
    """The one registered method whose class sets `flag` (a `RewardSource` class attribute such as `default`): the
    engine asks the methods rather than naming one."""
    marked = sorted(name for name, cls in registered().items() if getattr(cls, flag))
    if len(marked) != 1:
        raise CorewardError(f"exactly one registered reward method must set `{flag} = True`, found "
                            f"{len(marked)}: {', '.join(marked) or 'none'}")
    return registered()[marked[0]]


def default_method() -> type[RewardSource]:
    """The method a config without `rewards:` trains with (the one that sets `default`)."""
    return marked_method("default")


def reference_method() -> type[RewardSource]:
    """The method whose reward is the verifier's own verdict (sets `ground_truth`): the reference row of `coreward
    map`, which every other reward is measured against."""
    return marked_method("ground_truth")


def source_class(name: str, key: str = "name") -> type[RewardSource]:
    """The class for a config's reward `name`: a registered method, or `module.path:ClassName` (a RewardSource
    subclass, or a TRL-style reward function `f(completions, **kwargs)`, wrapped by FunctionReward)."""
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as err:
            raise CorewardError(f"key {key}: cannot import reward source {name!r}: {err}") from None
        if callable(cls) and not isinstance(cls, type):
            from coreward.rewards.function import FunctionReward

            return FunctionReward.of(cls, name=name)
        if not (isinstance(cls, type) and issubclass(cls, RewardSource)):
            raise CorewardError(f"key {key}: {name!r} is not a coreward.rewards.RewardSource subclass or a "
                                "reward function")
        return cls
    sources = registered()
    if name not in sources:
        from coreward.runtime.names import did_you_mean

        raise CorewardError(f"key {key}: unknown reward {name!r}{did_you_mean(name, sources)} (known: "
                            f"{', '.join(sorted(sources))}, or module.path:ClassName)")
    return sources[name]


def build_source(name: str, params: Any, key: str = "rewards.0") -> RewardSource:
    """A source from a config entry: `params` a mapping (parsed here) or the source's parsed Params (as
    `RewardSpec.parsed_params` returns them: not parsed again). Every error names the reward and `key`."""
    cls = source_class(name, key=f"{key}.name")
    parsed = params if isinstance(params, cls.Params) else parse_params(cls, params, key=f"{key}.params")
    try:
        source = cls.from_params(parsed)
    except ParamsError:
        raise
    except (CorewardError, ValueError, TypeError) as err:  # the source's constructor refused them
        raise ParamsError(f"reward {name!r}: key {key}.params: {err}") from None
    source.config_key = key
    return source
