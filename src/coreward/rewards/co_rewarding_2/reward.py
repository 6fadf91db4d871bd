"""Co-rewarding-II: agree with a slowly updated EMA teacher.

The teacher θ_T starts as the policy θ and follows it by an exponential moving average (see
`ema_teacher.py`): before step t, θ_T ← α(t)·θ + (1 − α(t))·θ_T, α(t) cosine from 0.01 to 1e-5 (the authors' run_corewarding-II.sh).
For each prompt group g the teacher samples its own G rollouts (temperature 1.0), and

    ŷ_g = majority answer of the teacher's G rollouts     (empty answers don't vote; ties: first seen)
    r_i = 1[a_i ≡ ŷ_g]  for each policy rollout i ∈ g      (no label, or no answer → 0)

The policy can't raise its reward by collapsing onto its own current answers (the failure of plain
majority voting): the label comes from a model that moves ~1/α times slower. With `as_reference`, the
teacher is also the KL reference, as in the authors' code.

No reference answer is used. When references exist, the label accuracy and the teacher's own accuracy
are logged, so one can watch the pseudo labels against the truth.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from coreward.rewards.base import DataNeeds, Policy, RewardSource, RolloutBatch, register
from coreward.rewards.co_rewarding_2.ema_teacher import EmaTeacher
from coreward.rewards.health import HealthWatch, Span
from coreward.rewards.memory import ALL, MemoryItem, MemoryNeeds, PlannedRun
from coreward.rewards.voting import Extract, Match, extract, label_accuracy, majority_votes, matches_label
from coreward.runtime.files import atomic_write_text


@register("co_rewarding_2")
class CoRewarding2Reward(RewardSource):
    label = "Co-rewarding-II"
    step_cost = 1.3
    exports = {"teacher": ("Co-rewarding-II EMA teacher",
                           "AutoModelForCausalLM.from_pretrained(PATH)  # LoRA runs: PeftModel.from_pretrained(base, PATH)")}
    table_order = 4

    @dataclass
    class Params:
        alpha_start: float = 0.01  # EMA weight of the policy at step 0 (cosine schedule down to alpha_end)
        alpha_end: float = 1e-5  # EMA weight of the policy at the last step (the authors' script)
        update_every: int = 1  # update the teacher every K steps
        as_reference: bool = False  # the teacher is also the KL reference (the authors'); needs grpo.beta > 0
        temperature: float = 1.0  # the teacher's sampling temperature
        match: Match = "verified"  # "verified": math-verify equivalence; "exact": equal strings (the authors')
        teacher_prompt: Literal["same", "rephrased"] = "same"  # the teacher rolls out the policy's prompt, or its rephrasing (the authors' data.use_aug; needs teacher_rephrasings)
        teacher_rephrasings: str | None = None  # each question's rephrasing, for teacher_prompt: rephrased: "demo" or "arith" (the task's own wording) or a file from `coreward rephrase` / a verl rewrite parquet aligned with data.train, rendered like the prompt
        dump_dir: str | None = None  # write the teacher's rollouts, answers and label of every step to DIR/step_N.jsonl (the authors' rollout_data_dir/ref)
        extract: Extract = "default"  # "default": extract_answer (boxed, ####, "the answer is", cleaned); "boxed_raw": the authors' raw last \boxed{} (co_rewarding_II.py)

        def validate(self) -> None:
            EmaTeacher(self.alpha_start, self.alpha_end, self.update_every)  # its constructor checks the schedule
            if self.teacher_prompt == "rephrased" and not self.teacher_rephrasings:
                raise ValueError("teacher_prompt: rephrased needs teacher_rephrasings (the rephrasing of each "
                                 "training question)")

    @classmethod
    def data_needs(cls, params: Params) -> DataNeeds:
        return DataNeeds(teacher_rephrasings=params.teacher_rephrasings)

    @classmethod
    def memory_needs(cls, params: Params, run: PlannedRun) -> MemoryNeeds:
        """The teacher's weights (ema_teacher.py): a float32 copy of the policy; as the KL reference, float32 masters
        beside a 16-bit reference (none where the reference is float32 already); under LoRA a second adapter."""
        if run.lora:
            return MemoryNeeds()
        sharded = run.processes if run.engine in ("zero3", "fsdp2") else 1  # the copy is prepared like the policy
        float32_copy = run.policy_parameters * 4 // sharded
        if not params.as_reference:
            return MemoryNeeds([MemoryItem("EMA teacher (float32)", float32_copy, ALL, "a float32 copy of the policy",
                                           gpu_measured=True)])
        needs = MemoryNeeds(kl_reference="the EMA teacher itself")
        if run.kl_reference and run.policy_weights_dtype == "float32" and run.engine != "zero2":
            needs.notes.append("the EMA teacher is TRL's reference (float32 weights): the EMA runs on it, no copy")
        else:  # ZeRO-2 casts the reference to bf16
            needs.items.append(MemoryItem("EMA teacher float32 masters", float32_copy, ALL,
                                          "the EMA of a 16-bit reference runs on float32 copies"))
        return needs

    def __init__(self, **params):
        super().__init__(**params)
        p = self.params
        self.teacher = EmaTeacher(p.alpha_start, p.alpha_end, p.update_every, p.as_reference, p.temperature)
        self._update_time: float | None = None

    @property
    def match(self) -> Match:
        return self.params.match

    def on_step_begin(self, policy: Policy) -> None:
        """θ_T ← α·θ + (1 − α)·θ_T before this step's rollouts (train mode only)."""
        start = time.perf_counter()
        self.teacher.attach(policy)
        self.teacher.maybe_update(policy.step, policy.max_steps)
        self._update_time = time.perf_counter() - start

    def health_watches(self) -> list[HealthWatch]:
        return [TeacherDistanceWatch()]

    def moves_reference(self) -> bool:
        """With `as_reference` the EMA teacher is the KL reference, so the reference drifts from the initial policy."""
        return self.params.as_reference

    def compute(self, batch: RolloutBatch) -> list[float]:
        """Teacher rollouts for each group's prompt, split across processes, then the rewards."""
        policy = batch.policy
        G = batch.num_generations
        group_prompts = [batch.prompt_ids[rows.start] for rows in batch.groups()]
        if self.params.teacher_prompt == "rephrased":  # use_aug: the same question in other words
            (teacher_prompts,) = batch.require_columns(self.name, "teacher_prompt")
            group_prompts = [policy.tokenize_prompt(teacher_prompts[rows.start]) for rows in batch.groups()]
        start = time.perf_counter()
        teacher_completions = policy.map_shards(lambda share: self.teacher.generate(policy, share, G), group_prompts)
        batch.log("time/teacher_generation", time.perf_counter() - start)
        batch.log("time/teacher_update", self._update_time)
        batch.log("co_rewarding_2/alpha", self.teacher.last_alpha)
        batch.log("co_rewarding_2/teacher_distance", self.teacher.last_distance)  # ‖θ − θ_T‖₂ (TeacherDistanceWatch)
        return self.score(batch, teacher_completions)

    def score(self, batch: RolloutBatch, teacher_completions: list[list[str]]) -> list[float]:
        """Rewards of the policy's rollouts given the teacher's rollouts of each group (one list per group)."""
        verifier = batch.verifier
        teacher_answers = [[extract(c, self.params.extract) for c in group] for group in teacher_completions]
        labels = [vote[0] for vote in majority_votes(teacher_answers, self.match, verifier, batch.map_shards)]
        if self.params.dump_dir and batch.mode == "train" and (batch.policy is None or batch.policy.rank == 0):
            self._dump(batch, teacher_completions, teacher_answers, labels)
        answers = batch.extracted_answers(self.params.extract)
        rewards = []
        for label, rows in zip(labels, batch.groups()):
            rewards += [1.0 if ok else 0.0 for ok in matches_label(label, [answers[i] for i in rows], self.match, verifier)]

        batch.log("co_rewarding_2/teacher_policy_agreement", sum(rewards) / len(rewards))
        batch.log("co_rewarding_2/no_label_rate", sum(label is None for label in labels) / len(labels))
        if batch.references is not None:
            group_refs = [batch.references[rows.start] for rows in batch.groups()]
            batch.log("co_rewarding_2/label_accuracy", label_accuracy(labels, group_refs, verifier))
            batch.log("co_rewarding_2/teacher_accuracy", teacher_accuracy(teacher_completions, group_refs, verifier))
        return rewards

    def _dump(self, batch: RolloutBatch, completions: list[list[str]], answers, labels) -> None:
        """One JSON line per group: the policy's prompt, the teacher's rollouts and answers, the label (and the
        reference, when the data has one). Written whole per step, so a killed run leaves no torn file."""
        refs = batch.references
        lines = []
        for g, rows in enumerate(batch.groups()):
            lines.append(json.dumps({
                "step": batch.step, "prompt": completion_safe(batch.prompts[rows.start]),
                "teacher_completions": completions[g], "teacher_answers": answers[g], "label": labels[g],
                "reference": refs[rows.start] if refs else None,
            }, ensure_ascii=False))
        directory = Path(self.params.dump_dir)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(directory / f"step_{batch.step}.jsonl", "\n".join(lines) + "\n")

    def save_state(self, directory: Path) -> None:
        self.teacher.save(directory)

    def load_state(self, directory: Path) -> None:
        self.teacher.load(directory)

    def export_models(self, directory: Path) -> dict[str, Path]:
        folder = self.teacher.export(Path(directory) / "teacher")
        return {"teacher": folder} if folder else {}


def completion_safe(prompt: Any) -> Any:
    """A prompt as JSON can hold it: text, or chat messages as plain dicts."""
    return prompt if isinstance(prompt, str) else [dict(m) for m in prompt]


def teacher_accuracy(teacher_completions: list[list[str]], group_refs: list[str | None], verifier: Any) -> float | None:
    """Verified accuracy of the teacher's rollouts, over the groups that have a reference."""
    pairs = [(c, ref) for group, ref in zip(teacher_completions, group_refs) if ref is not None for c in group]
    if not pairs:
        return None
    verdicts = verifier.verify_completions([c for c, _ in pairs], [ref for _, ref in pairs])
    return sum(v.correct for v in verdicts) / len(verdicts)


class TeacherDistanceWatch(HealthWatch):
    """The teacher–policy weight distance ‖θ − θ_T‖ (`co_rewarding_2/teacher_distance`), summed up at the end. A
    teacher equal to the policy after it moved is an error that stops the run where it is measured (ema_teacher.py)."""

    def __init__(self):
        self.distance = Span()

    def check(self, logs, step):
        if "co_rewarding_2/teacher_distance" in logs:
            self.distance.add(step, logs["co_rewarding_2/teacher_distance"])
        return []

    def report(self, broken):
        d = self.distance.as_dict()
        lines = [f"Co-rewarding-II: teacher–policy weight distance ‖θ − θ_T‖ {d['first']['value']:.3g} at step "
                 f"{d['first']['step']}, {d['last']['value']:.3g} at step {d['last']['step']} (min "
                 f"{d['min']['value']:.3g} at step {d['min']['step']})"] if d else []
        return {"teacher_distance": d}, lines
