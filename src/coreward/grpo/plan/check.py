"""The plan at train time: `coreward train` plans the run on this process's hardware before any weights load, logs
its `memory:` line, and on a GPU refuses a run whose plan exceeds the device (naming what would fit)."""

from __future__ import annotations

import os

from coreward.grpo.config import TrainConfig
from coreward.grpo.plan.advice import suggest
from coreward.grpo.plan.hardware import Hardware, running_hardware
from coreward.grpo.plan.result import Plan
from coreward.grpo.plan.step import plan_run
from coreward.runtime.errors import CorewardError
from coreward.runtime.memory import format_bytes


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
            f"{format_bytes(plan.device_bytes)} on {where}; worst-case lengths: {plan.lengths.describe()}")
    if plan.fits or hardware.device == "cpu" or not plan_check:
        return line + ("" if plan.fits else " (over: --no-plan-check)"), plan
    plan.suggestions = suggest(config, plan, prompt_tokens=prompt_tokens)
    largest = ", ".join(f"{i.name} {format_bytes(i.bytes)}" for i in plan.largest_items(4))
    fixes = "; ".join(f"{s.command_line()} ({format_bytes(s.peak_bytes)}: {s.cost})" for s in plan.suggestions[:4])
    near = "; ".join(f"{s.command_line()} ({format_bytes(s.peak_bytes)}, {1 - s.peak_bytes / plan.device_bytes:.0%} "
                     "spare)" for s in plan.near)
    raise CorewardError(f"the memory plan of this run needs {format_bytes(plan.peak_bytes)} per GPU in its "
                        f"{plan.peak_phase} phase, {plan.needs_ratio:.2f}x the {format_bytes(plan.device_bytes)} of "
                        f"{where} (largest: {largest}). " + (f"Settings that would fit: {fixes}. " if fixes else "")
                        + (f"Closest that fit with less spare: {near}. " if near and not fixes else "")
                        + "`coreward plan --config ...` shows the whole plan; --no-plan-check trains anyway")
