"""Static model-based reward: a frozen VerifyRM's probability that a completion is correct, or an ensemble's.

    s_k(i) = σ(f_θk(<question>q</question>\\n<reference_answer>ref</reference_answer>\\n<completion>o_i</completion>))

    one RM   (path: a string)       r_i = s_1(i)
    K RMs    (path: a list)         r_i = combine(s_1(i), ..., s_K(i)):
        mean:         s̄(i) = (1/K) Σ_k s_k(i)
        min:          min_k s_k(i)                                   worst-case optimization (WCO)
        uncertainty:  s̄(i) − λ·std_k s_k(i)    std_k = sqrt((1/K) Σ_k (s_k(i) − s̄(i))²)
                      s̄(i) − λ·var_k s_k(i)    with uncertainty_spread: variance (uncertainty-weighted optimization, UWO)
    r_i = 1[r_i > threshold]            with the `threshold` option

θ never changes during the run. That is the point of this row of the Cooper paper: the policy keeps
moving while the RM stays where its training data left it, so completions unlike any it was trained on
(wrong answers of a kind it never saw as negatives) can score high, and the policy learns to produce them.

Ensembles, and why their spread is the std by default: the combine rules' file, rewards/ensemble.py.

Every member is scored on every distinct (question, reference, completion) triple of the step, member after
member, each in batches of `batch_size` sorted by length (and, with `max_tokens_per_pass`, of at most that many
padded tokens); all members stay loaded on the RM's device for the whole run (frozen: weights only, no
gradients or optimizer state), so K members cost K times one RM's weights in memory and K scoring passes a
step; with `param_offload` they stay on the CPU and each comes to the device for its own pass only (one member's
weights there at a time, at the cost of copying them over every step). docs/reference/methods.md gives the demo RM's figures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from coreward.rewards import memory as plan
from coreward.rewards.base import Policy, RewardSource, RolloutBatch, register
from coreward.rewards.ensemble import combine_scores, describe_format, log_members
from coreward.rewards.memory import MemoryItem, MemoryNeeds, PlannedRun
from coreward.rewards.rollout_diagnostics import log_rollout_diagnostics
from coreward.rm.evaluate import score_unique
from coreward.rm.inputs import RMInputSettings
from coreward.rm.model import INPUT_FORMAT_KEY, VerifyRM
from coreward.runtime.errors import CorewardError
from coreward.runtime.memory import DTYPE_BYTES, parameter_count, scoring_bytes


@register("model")
class ModelReward(RewardSource):
    label = "Static reward model"
    step_cost = 1.2
    table_order = 1
    needs_references = True

    @dataclass
    class Params(RMInputSettings):
        # -- device, rm_cut, question_field, max_tokens_per_pass, param_offload: declared once, in rm/inputs.py's
        # RMInputSettings (shared with Cooper)
        path: str | list[str] = "demo"  # the RM: a directory, a hub id, or "demo" (the demo VerifyRM); a list of them: an ensemble (demo members: demo:1 ... demo:4)
        combine: Literal["mean", "min", "uncertainty"] = "mean"  # an ensemble's reward: the members' mean, their min (worst case), or mean − λ·spread (uncertainty-weighted)
        uncertainty_weight: float = 1.0  # λ of combine: uncertainty
        uncertainty_spread: Literal["std", "variance"] = "std"  # the spread combine: uncertainty subtracts: the members' std, or their variance (Coste et al.'s UWO)
        threshold: float | None = None  # None: σ(logit) as the reward; a value in (0, 1): 1[σ(logit) > threshold]
        batch_size: int = 64  # completions scored per forward pass (per member)

        @property
        def members(self) -> list[str]:
            """The RMs scored: the one path, or the ensemble's members in order."""
            return [self.path] if isinstance(self.path, str) else list(self.path)

        @property
        def is_ensemble(self) -> bool:
            return not isinstance(self.path, str)

        def validate(self) -> None:
            from coreward.runtime.assets import is_asset, is_path_like, registered_names

            if self.threshold is not None and not 0 < self.threshold < 1:
                raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
            if self.batch_size < 1:
                raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
            self.validate_rm_inputs()
            if self.uncertainty_weight < 0:
                raise ValueError(f"uncertainty_weight must be >= 0 (λ of mean − λ·spread), got {self.uncertainty_weight}")
            if not self.is_ensemble:
                if self.combine != "mean":
                    raise ValueError(f"combine: {self.combine!r} combines the scores of several RMs, but path is one "
                                     f"RM ({self.path!r}): give path as a list of RMs")
                return
            if not self.path:
                raise ValueError("path is an empty list: an ensemble needs at least one RM (a list of RM directories, "
                                 "hub ids or demo RMs such as [demo, demo:1, demo:2])")
            seen: dict[str, int] = {}
            for i, member in enumerate(self.path):
                if not member.strip():
                    raise ValueError(f"path.{i} is empty: each member of the ensemble names an RM")
                if member in seen:  # twice the weight in the mean, and a spread that understates the disagreement
                    raise ValueError(f"path.{i}: {member!r} is already member path.{seen[member]} of the ensemble")
                seen[member] = i
                if Path(member).expanduser().is_dir() or member in registered_names("rm"):
                    continue
                if is_path_like(member):
                    raise ValueError(f"path.{i}: no such directory: {member} (a member is a saved RM directory, a hub "
                                     "id, or a demo RM)")
                asset, _, index = member.partition(":")
                if index and not (is_asset(asset) and index.isdigit()):  # no hub id has a ":"
                    raise ValueError(f"path.{i}: {member!r} is neither a directory nor an RM name (known: "
                                     f"{', '.join(registered_names('rm'))}, and the demo RM's ensemble members "
                                     "demo:1, demo:2, ...)")

    @classmethod
    def memory_needs(cls, params: Params, run: PlannedRun) -> MemoryNeeds:
        """Every member's frozen weights (with `param_offload` on the device to score only) and one scoring pass."""
        needs, members = MemoryNeeds(), params.members
        if plan.rm_on_its_own_device(params, run, needs.notes):
            return needs
        for m, path in enumerate(members):
            key, member = f"{run.key}.params.path" + f".{m}" * (len(members) > 1), f" member {m}" * (len(members) > 1)
            shape = plan.rm_shape(path, key, needs.notes)
            dtype = plan.config_dtype(path, "rm", key) if plan.rm_exists(path) else "float32"
            needs.items.append(MemoryItem(f"{run.key} static RM{member} weights", parameter_count(shape, "score")
                                          * DTYPE_BYTES[dtype], (plan.SCORING,) if params.param_offload else plan.ALL, f"{dtype}, frozen"))
        rows, length = plan.rm_passes(params, params.batch_size, min(run.rm_input_tokens, shape.max_position_embeddings), run.completions)
        needs.items.append(MemoryItem(f"{run.key} static RM scoring pass", scoring_bytes(shape, rows, length, "float32"),
                                      (plan.SCORING,), f"{rows} sequences x {length} tokens per pass, no grad"))
        if not params.param_offload and not run.shards_like_the_policy:
            needs.levers.append(plan.Lever.setting(f"{run.key}.params.param_offload=true",
                                              "the RM's weights copied to the device for each scoring"))
        return needs

    def __init__(self, **params):
        super().__init__(**params)
        self._members: list[VerifyRM] | None = None  # the loaded RMs: the single path's, or the ensemble's members

    def member_key(self, index: int) -> str:
        """The config key of member `index` (the path itself when it is one RM), for errors."""
        key = f"reward {self.name!r}: key {self.config_key}.params.path"
        return f"{key}.{index}" if self.params.is_ensemble else key

    def preflight(self) -> None:
        """Each RM loads (config, weights present and whole, tokenizer), and an ensemble's members read one input
        format: checked before training starts, from the files alone."""
        from coreward.runtime.assets import announce_builds
        from coreward.runtime.model_files import check_model

        announce_builds(self.params.members, "rm", f"reward {self.name!r}")  # members to build: said first, with the time
        formats = []
        for i, member in enumerate(self.params.members):
            where = check_model(member, "rm", key=self.member_key(i))
            config = Path(where) / "config.json"
            formats.append(json.loads(config.read_text()).get(INPUT_FORMAT_KEY) if config.is_file() else None)
        self._check_formats(formats)

    def _check_formats(self, formats: list[dict | None]) -> None:
        """Members must read one input format, as the RMs recorded it when saved (rm/model.py `input_format`): one
        `rm_cut` and one template feed them all. An RM saved without the record (by other tools) is not checked."""
        if not self.params.is_ensemble:
            return
        recorded = [(i, f) for i, f in enumerate(formats) if isinstance(f, dict)]
        for i, fmt in recorded[1:]:
            j, first = recorded[0]
            if (fmt.get("template"), fmt.get("drops")) != (first.get("template"), first.get("drops")):
                raise CorewardError(
                    f"{self.member_key(i)}: the ensemble's members read different input formats: path.{i} "
                    f"({self.params.members[i]}) was saved reading {describe_format(fmt)}, path.{j} "
                    f"({self.params.members[j]}) {describe_format(first)}; one template and one rm_cut feed every "
                    "member, so ensemble RMs of one format")

    def rm(self, policy: Policy | None = None) -> VerifyRM:
        """The RM of a single `path`, loaded on first use on `device` ("auto": the policy's device, else GPU if any,
        else CPU). An ensemble has `members`."""
        if self.params.is_ensemble:
            raise CorewardError(f"reward {self.name!r}: key {self.config_key}.params.path is an ensemble of "
                                f"{len(self.params.members)} RMs: use members()")
        return self.members(policy)[0]

    def members(self, policy: Policy | None = None) -> list[VerifyRM]:
        """Every RM scored: the single path's, or all the ensemble's members, loaded together on first use and kept,
        frozen, on the device for the rest of the run."""
        if self._members is None:
            members = []
            for i, member in enumerate(self.params.members):
                try:
                    members.append(self._load(member, policy))
                except CorewardError as err:
                    if not self.params.is_ensemble:
                        raise
                    raise CorewardError(f"{self.member_key(i)}: {err}") from None
            self._check_formats([getattr(rm.model.config, INPUT_FORMAT_KEY, None) for rm in members])
            self._members = members
        return self._members

    def _load(self, path: str, policy: Policy | None) -> VerifyRM:
        device = policy.device if self.params.device == "auto" and policy is not None else self.params.device
        rm = VerifyRM.from_pretrained(path, device=device, batch_size=self.params.batch_size, cut=self.params.rm_cut,
                                      **self.params.rm_options())  # max_tokens_per_pass, param_offload
        rm.model.requires_grad_(False)
        return rm

    def compute(self, batch: RolloutBatch) -> list[float]:
        (references,) = batch.require_columns(self.name, "reference")
        questions = self.params.questions(batch, self.name)
        triples = list(zip(questions, (r or "" for r in references), batch.completions))
        # every process holds the whole batch: each scores its share of the distinct triples, all get all
        member_scores = [score_unique(rm, triples) for rm in self.members(batch.policy)]
        if self.params.is_ensemble:
            scores, spread = combine_scores(member_scores, self.params.combine, self.params.uncertainty_weight,
                                            self.params.uncertainty_spread)
            log_members(batch, member_scores, spread)
        else:
            (scores,) = member_scores
        # a NaN/inf logit scores NaN (see VerifyRM.score): the engine skips that completion and counts it
        finite = [s for s in scores if math.isfinite(s)]
        batch.log("model/nonfinite_logits", float(len(scores) - len(finite)))
        if finite:
            batch.log("model/score_mean", sum(finite) / len(finite))
        if batch.mode == "train" and "verifier" in batch.context:  # the frozen RM on what the policy writes now: its
            log_rollout_diagnostics(batch, [v.correct for v in batch.verdicts()], scores)  # ranking falls when hacked
        if self.params.threshold is None:
            return scores
        return [s if not math.isfinite(s) else 1.0 if s > self.params.threshold else 0.0 for s in scores]
