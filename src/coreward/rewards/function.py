"""A TRL reward function as a coreward reward source.

TRL's convention (`reward_funcs` of GRPOTrainer) is a plain function

    def f(prompts, completions, completion_ids, **kwargs) -> list[float | None]

where `kwargs` holds every dataset column. `FunctionReward.of(f)` makes it a `RewardSource`, so it runs on
coreward's whole gathered batch (every group complete, on every process) and can be mixed with the other
sources. A config names it by import path, like a source class: `rewards: [{name: mypkg.rewards:f}]`.

What arrives, one value per completion (`data/rows.py` builds the rows): `prompts`, `completions` (text),
`completion_ids`, `trainer_state` (None), coreward's fields (`question`, `answer`, `id`, `solution`, `level`,
`subject`, `source`, `split`, `messages`; `pair_id` and `view` with paired views, `teacher_prompt` with a
teacher's rephrasings) and, for a user's file, directory or hub dataset, every column of the user's rows under
its own name (`problem`, `solution`, ...; where a name is also one of coreward's fields, coreward's value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coreward.rewards.base import RewardSource, RolloutBatch
from coreward.runtime.errors import CorewardError
from coreward.runtime.user_code import claim_module


class FunctionReward(RewardSource):
    """Calls `function` with TRL's keyword arguments; completions are text (TRL's standard format)."""

    function: Callable[..., list[Any]]

    @classmethod
    def of(cls, function: Callable[..., list[Any]], name: str | None = None) -> type[FunctionReward]:
        """A source class wrapping `function` (classes, not instances, are what configs name). Its module is the
        user's code: a traceback through it is shown as theirs (runtime/user_code.py), wherever it is installed."""
        claim_module(function.__module__)
        return type(f"FunctionReward_{function.__name__}", (cls,),
                    {"function": staticmethod(function), "name": name or function.__name__})

    def compute(self, batch: RolloutBatch) -> list[Any]:
        columns = {k: v for k, v in batch.columns.items() if k not in TRL_ARGUMENTS}  # never passed twice
        # an exception raised in the function is the user's: coreward train names the function and shows the
        # frames of their files (runtime/user_code.py), not the trainer's
        returned = self.function(prompts=batch.prompts, completions=batch.completions,
                                 completion_ids=batch.completion_ids, trainer_state=None, **columns)
        try:
            values = list(returned)
        except TypeError:  # not a sequence: None (a forgotten return), a number
            values = None
        if values is None or len(values) != len(batch):
            got = f"{len(values)} values" if values is not None else f"{type(returned).__name__} {returned!r:.40}"
            raise CorewardError(f"reward function {self.name} returned {got} for {len(batch)} completions: it must "
                                "return a list with one reward (a number, or None) per completion")
        return values


TRL_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state")  # the arguments TRL names itself
