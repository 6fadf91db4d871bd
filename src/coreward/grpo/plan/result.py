"""What a plan is and how it prints: its items, each phase's total, the peak, whether it fits, and the suggestions
that would make it fit (grpo/plan/advice.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from coreward.grpo.plan.hardware import Hardware
from coreward.rewards.memory import ALL, PHASES, RM_STEP, RM_UPDATE, Lever, MemoryItem
from coreward.runtime.memory import format_bytes


Item = MemoryItem  # one line of the plan: what the engine and every reward source hold (rewards/memory.py)
SPARE = 0.10  # the paper configs' declared hardware keeps at least this fraction free; every suggestion does too


@dataclass
class Suggestion:
    settings: list[str]  # `--set` items (or `--gpus N --engine E`)
    cost: str
    peak_bytes: int

    def command_line(self) -> str:
        return " ".join(s if s.startswith("--") else f"--set {s}" for s in self.settings)

    def to_json(self) -> dict[str, Any]:
        return {"set": self.settings, "cost": self.cost, "peak_bytes": self.peak_bytes}

    def line(self, device_bytes: int) -> str:
        """How `coreward plan` prints it: the settings, the peak they give with its spare, what they cost."""
        return (f"  {self.command_line()}   -> {format_bytes(self.peak_bytes)} "
                f"({1 - self.peak_bytes / device_bytes:.0%} spare); {self.cost}")


def step_phases(source_items: list[MemoryItem]) -> tuple[str, ...]:
    """The phases a step has, from what its reward sources hold: an RM update and an RM step only where a source
    holds something in them and not through the whole step (a learned RM); majority voting's step has neither."""
    learned = any(item.phases != ALL and {RM_UPDATE, RM_STEP} & set(item.phases) for item in source_items)
    return PHASES if learned else tuple(p for p in PHASES if p not in (RM_UPDATE, RM_STEP))


@dataclass
class Plan:
    hardware: Hardware
    items: list[Item]
    notes: list[str] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)
    levers: list[Lever] = field(default_factory=list)  # the reward sources' settings that would lower it
    # why the run cannot start whatever its peak (a colocated vLLM's share that cannot hold the policy's weights and
    # one sequence's KV cache): such a plan does not fit
    problems: list[str] = field(default_factory=list)
    lengths: Any = None  # the Lengths it planned at (lengths.py)
    worst_case_peak_bytes: int | None = None  # planned from data: the same run's peak with every sequence at its longest
    phases: tuple[str, ...] = PHASES  # the phases this step has (`step_phases`)
    # nothing fits with SPARE to spare: the closest combinations that fit with less, and the fewest GPUs of this size
    # that fit with SPARE (advice.py)
    near: list[Suggestion] = field(default_factory=list)
    fewest_gpus: Suggestion | None = None

    def phase_bytes(self, phase: str) -> int:
        return sum(item.bytes for item in self.items if phase in item.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phase_bytes)

    @property
    def peak_bytes(self) -> int:
        return self.phase_bytes(self.peak_phase)

    @property
    def device_bytes(self) -> int:
        return self.hardware.device_bytes

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.device_bytes and not self.problems

    @property
    def fits_with_spare(self) -> bool:
        """Fits with SPARE of the device free: what the shipped configs promise, and every suggestion keeps."""
        return self.fits and self.peak_bytes <= (1 - SPARE) * self.device_bytes

    @property
    def unmeasured_on_gpu(self) -> list[str]:
        """The items whose terms no GPU has checked yet (`MemoryItem.gpu_measured`): what a "fits" rests on
        unmeasured."""
        if not self.hardware.on_gpu:
            return []
        return [i.name for i in sorted(self.items, key=lambda i: -i.bytes) if not i.gpu_measured and i.bytes]

    @property
    def spare(self) -> float:
        """The fraction of the device the peak leaves free (negative: over)."""
        return 1 - self.peak_bytes / self.device_bytes

    @property
    def needs_ratio(self) -> float:
        """The peak over the device's memory: 2.75 reads "needs 2.75x the memory" where a spare of -175% reads as
        nothing."""
        return self.peak_bytes / self.device_bytes

    def verdict(self) -> str:
        if self.fits:
            return f"fits ({self.spare:+.0%} spare)"
        if self.peak_bytes <= self.device_bytes:  # under the device, but a problem stops it
            return "does NOT fit"
        return (f"does NOT fit: {format_bytes(self.peak_bytes - self.device_bytes)} missing, needs "
                f"{self.needs_ratio:.2f}x the memory")

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
            "phases": {phase: self.phase_bytes(phase) for phase in self.phases},
            "items": [{"name": i.name, "bytes": i.bytes, "phases": list(i.phases), "note": i.note} for i in self.items],
            "notes": self.notes, "problems": self.problems, "unmeasured_on_gpu": self.unmeasured_on_gpu,
            "suggestions": [s.to_json() for s in self.suggestions], "near": [s.to_json() for s in self.near],
            "fewest_gpus": self.fewest_gpus.to_json() if self.fewest_gpus else None,
            "missing_bytes": max(0, self.peak_bytes - self.device_bytes), "needs_ratio": round(self.needs_ratio, 4),
            "lengths": self.lengths_json(), "worst_case_peak_bytes": self.worst_case_peak_bytes,
        }

    def lengths_json(self) -> dict | None:
        if self.lengths is None:
            return None
        return {"prompt_tokens": self.lengths.prompt_tokens, "completion_tokens": self.lengths.completion_tokens,
                "completion_from": self.lengths.completion_from, "seq_len": self.lengths.seq_len,
                "rows": self.lengths.rows}

    def render(self) -> str:
        """The plan as `coreward plan` prints it."""
        lines = [f"memory plan per device: {self.hardware.describe()}", ""]
        width = max(len(i.name) for i in self.items)
        short = {"generation": "gen", "reward scoring": "score", "RM update": "rm-upd", "RM step": "rm-step",
                 "policy update": "policy"}
        for item in sorted(self.items, key=lambda i: -i.bytes):
            held = [p for p in item.phases if p in self.phases]  # of the phases this step has
            phases = "all phases" if item.phases == ALL or held == list(self.phases) else ", ".join(short[p] for p in held)
            lines.append(f"  {item.name:<{width}}  {format_bytes(item.bytes):>10}  [{phases}]"
                         + (f"  {item.note}" if item.note else ""))
        lines.append("")
        for phase in self.phases:
            mark = "  <- peak" if phase == self.peak_phase else ""
            lines.append(f"  phase {phase:<15} {format_bytes(self.phase_bytes(phase)):>10}{mark}")
        lines += ["", f"peak {format_bytes(self.peak_bytes)} ({self.peak_phase}) of {format_bytes(self.device_bytes)}: "
                  f"{self.verdict()}"]
        lines += [f"does NOT fit: {problem}" for problem in self.problems]
        if self.lengths is not None:
            lines.append(f"lengths: {self.lengths.describe()}")
        if self.worst_case_peak_bytes is not None:
            lines.append(f"worst case (every completion at grpo.max_completion_length): peak "
                         f"{format_bytes(self.worst_case_peak_bytes)}")
        unmeasured = [i for i in self.items if i.name in self.unmeasured_on_gpu and self.peak_phase in i.phases]
        if self.fits and unmeasured:
            lines.append(f"of the peak's {format_bytes(self.peak_bytes)}, {format_bytes(sum(i.bytes for i in unmeasured))} "
                         "is in terms no GPU has checked yet (docs/how-to/memory-plan.md, the GPU check): "
                         + ", ".join(i.name for i in sorted(unmeasured, key=lambda i: -i.bytes)))
        lines += [f"note: {note}" for note in self.notes]
        if not self.fits:
            if self.suggestions:
                lines.append(f"settings that would fit with {SPARE:.0%} to spare (each planned again, the same GPUs "
                             "first):")
                lines += [s.line(self.device_bytes) for s in self.suggestions]
            else:
                lines.append(f"no combination of the settings coreward knows fits with {SPARE:.0%} to spare on these "
                             "GPUs")
            if self.near:
                lines.append(f"closest that fit with less than {SPARE:.0%} to spare (a longer sequence or the "
                             "allocator's fragmentation may then run out):")
                lines += [s.line(self.device_bytes) for s in self.near]
            if self.fewest_gpus:
                lines.append(f"fewest {format_bytes(self.device_bytes)} GPUs that fit with {SPARE:.0%} to spare, this "
                             "config otherwise as it is:")
                lines.append(self.fewest_gpus.line(self.device_bytes))
            if not (self.suggestions or self.near or self.fewest_gpus):
                lines.append("a smaller model, shorter sequences or more GPUs")
        return "\n".join(lines)
