"""Advice for a plan that does not fit: combinations of the settings the plan knows (each reward source's levers,
then the engine's: levers.py), on the same GPUs first, then on more GPUs under a sharding engine. Each combination
is planned again and proposed only where it fits with SPARE of the device free (what the shipped configs promise);
the fewest settings first, and no combination that holds a smaller one which already fits."""

from __future__ import annotations

import dataclasses
from itertools import combinations, product

from coreward.grpo.config import TrainConfig
from coreward.grpo.plan.hardware import Hardware, processes
from coreward.grpo.plan.levers import engine_levers
from coreward.grpo.plan.result import Plan, Suggestion
from coreward.grpo.plan.step import plan_run
from coreward.rewards.memory import PHASES, Lever
from coreward.runtime.errors import CorewardError


MAX_SETTINGS = 4  # levers in one suggestion at most
MAX_PLANS = 150  # plans tried on one hardware at most (a plan takes milliseconds)
SAME_GPUS, MORE_GPUS = 4, 2  # suggestions shown: on the user's GPUs, then on more
NEAR = 2  # where nothing fits with SPARE: the closest combinations shown that fit with less
MAX_GPUS = 64  # the most GPUs `fewest_gpus` tries
SHARDING = ("zero3", "fsdp2", "zero2")  # engines that divide the model states; zero3: the paper configs' on several GPUs


def candidate_settings(config: TrainConfig, plan: Plan, prompt_tokens: int | None = None) -> list[Lever]:
    """The settings that could lower the plan: the reward sources' levers first, then the engine's."""
    return plan.levers + engine_levers(config, plan, prompt_tokens)


def replan(config: TrainConfig, hardware: Hardware, settings: list[str], prompt_tokens: int | None) -> Plan:
    """The plan of `config` with `settings` applied (`--set` items, `--gpus N`, `--engine E`)."""
    from coreward.runtime.config import apply_overrides, build, to_dict

    sets = [s for s in settings if not s.startswith("--")]
    for s in settings:
        if s.startswith("--gpus"):
            hardware = dataclasses.replace(hardware, gpus=int(s.split()[1]))
        elif s.startswith("--engine"):
            hardware = dataclasses.replace(hardware, engine=s.split()[1])
    with processes(hardware):
        changed = build(TrainConfig, apply_overrides(to_dict(config), sets)) if sets else config
    return plan_run(changed, hardware, prompt_tokens)


def fitting_combinations(config: TrainConfig, plan: Plan, prompt_tokens: int | None, prefix: list[str],
                         prefix_cost: str, limit: int, near: list[Suggestion] | None = None) -> list[Suggestion]:
    """Up to `limit` combinations of `plan`'s levers with which it fits with spare, fewest levers first (each lever
    at its mildest choice that fits), none holding another; `prefix`: settings every combination starts with (more
    GPUs). `near` collects the combinations tried that fit with less than SPARE."""
    levers = candidate_settings(config, plan, prompt_tokens)
    found: list[tuple[set[int], Suggestion]] = []
    helps: set[int] = set()  # levers that alone lower some phase or remove a problem: only those are combined
    tried = 0
    for size in range(1, min(MAX_SETTINGS, len(levers)) + 1):
        for chosen in combinations(range(len(levers)) if size == 1 else sorted(helps), size):
            if any(smaller <= set(chosen) for smaller, _ in found):
                continue  # a combination it holds fits already: the rest would cost for nothing
            for picks in product(*(levers[i].choices for i in chosen)):
                if tried >= MAX_PLANS:
                    return [s for _, s in found][:limit]
                tried += 1
                settings = prefix + [s for pick in picks for s in pick]
                try:
                    again = replan(config, plan.hardware, settings, prompt_tokens)
                except (CorewardError, ValueError, KeyError):
                    continue
                if size == 1 and (len(again.problems) < len(plan.problems)
                                  or any(again.phase_bytes(p) < plan.phase_bytes(p) for p in PHASES)):
                    helps.add(chosen[0])
                cost = "; ".join(([prefix_cost] if prefix_cost else []) + [levers[i].cost for i in chosen])
                if again.fits_with_spare:
                    found.append((set(chosen), Suggestion(settings, cost, again.peak_bytes)))
                    break
                if again.fits and near is not None:
                    near.append(Suggestion(settings, cost, again.peak_bytes))
        if len(found) >= limit:
            break
    return [s for _, s in found][:limit]


def more_gpus(hardware: Hardware) -> list[tuple[list[str], str]]:
    """Larger launches of the user's GPU size: ZeRO-2 on 2, ZeRO-3 and FSDP2 on 8 (or the user's count)."""
    out = []
    for gpus, engine in ((max(2, hardware.gpus), "zero2"), (max(8, hardware.gpus), "zero3"),
                         (max(8, hardware.gpus), "fsdp2")):
        if (gpus, engine) != (hardware.gpus, hardware.engine):
            out.append(([f"--gpus {gpus}", f"--engine {engine}"], gpus_cost(gpus, engine)))
    return out


def suggest(config: TrainConfig, plan: Plan, limit: int = SAME_GPUS + MORE_GPUS,
            prompt_tokens: int | None = None) -> list[Suggestion]:
    """Settings with which the plan fits with spare: on the user's GPUs first (combinations of what the plan knows),
    then on more GPUs (alone, or, where nothing fits on the user's GPUs, with the fewest settings that make it).
    Where nothing fits on the user's GPUs with spare, `plan.near` gets the closest combinations that fit with less
    and `plan.fewest_gpus` the fewest GPUs of the user's size that fit with spare."""
    near: list[Suggestion] = []
    found = fitting_combinations(config, plan, prompt_tokens, [], "", SAME_GPUS, near)
    if not found:
        plan.near = closest(near)
        if plan.hardware.on_gpu:
            plan.fewest_gpus = fewest_gpus(config, plan, prompt_tokens)
    if plan.hardware.on_gpu:
        larger = []
        for hardware_settings, cost in more_gpus(plan.hardware):
            try:
                again = replan(config, plan.hardware, hardware_settings, prompt_tokens)
            except (CorewardError, ValueError, KeyError):
                continue
            if again.fits_with_spare:
                larger.append(Suggestion(hardware_settings, cost, again.peak_bytes))
            elif not found:
                larger += fitting_combinations(config, again, prompt_tokens, hardware_settings, cost, 1)
        found += larger[:MORE_GPUS]
    return found[:limit]


def closest(near: list[Suggestion]) -> list[Suggestion]:
    """Of the combinations that fit with less than SPARE, the one with the fewest settings (the smallest change), then
    the one with the most spare; one per set of levers (its mildest choices that give the most spare)."""
    best: dict[str, Suggestion] = {}
    for suggestion in near:  # a lever set's cost reads the same whatever choices it took
        if suggestion.cost not in best or suggestion.peak_bytes < best[suggestion.cost].peak_bytes:
            best[suggestion.cost] = suggestion
    fewest = sorted(best.values(), key=lambda s: (len(s.settings), s.peak_bytes))
    most_spare = sorted(best.values(), key=lambda s: (s.peak_bytes, len(s.settings)))
    return list({id(s): s for s in fewest[:1] + most_spare[:1]}.values())[:NEAR]


def gpus_cost(gpus: int, engine: str) -> str:
    return (f"{gpus} GPUs: accelerate launch --config_file configs/accelerate/{engine}.yaml (keep the global batch: "
            "fewer accumulation steps or a smaller per-device batch)")


def fewest_gpus(config: TrainConfig, plan: Plan, prompt_tokens: int | None) -> Suggestion | None:
    """The fewest GPUs of the plan's size with which the config as it is fits with SPARE, under the plan's engine
    where it divides the model states, else ZeRO-3 (what the paper configs on several GPUs run). None up to
    MAX_GPUS."""
    engine = plan.hardware.engine if plan.hardware.engine in SHARDING else SHARDING[0]
    for gpus in range(plan.hardware.gpus + 1, MAX_GPUS + 1):
        settings = [f"--gpus {gpus}", f"--engine {engine}"]
        try:
            again = replan(config, plan.hardware, settings, prompt_tokens)
        except (CorewardError, ValueError, KeyError):  # a batch this many processes cannot divide
            continue
        if again.fits_with_spare:
            return Suggestion(settings, gpus_cost(gpus, engine), again.peak_bytes)
    return None


def plan_with_suggestions(config: TrainConfig, hardware: Hardware, prompt_tokens: int | None = None,
                          completion_tokens: tuple[int, str] | None = None) -> Plan:
    plan = plan_run(config, hardware, prompt_tokens, completion_tokens)
    if not plan.fits:
        plan.suggestions = suggest(config, plan, prompt_tokens=prompt_tokens)
    return plan
