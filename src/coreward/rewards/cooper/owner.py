"""The parts a Cooper reward source owns besides its algorithm: the RM learner and the assistant, built on
first use, checkpointed with the trainer, and closed (`RMOwner`, mixed into `rewards/cooper/reward.py`'s source).

The RM is always loaded from files (the `rm` path, or the checkpoint being resumed) into its own
`VerifyRM`, never copied from another module, so it computes with its own weights whatever wraps the policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coreward.rewards.cooper.assistant import Assistant, build_assistant
from coreward.rewards.cooper.learner import RM_DIR, STATE_FILE, LearnerSettings, RMLearner
from coreward.rm.model import VerifyRM
from coreward.runtime.errors import CorewardError


class RMOwner:
    """Needs `self.params`: a `LearnerSettings` (rewards/cooper/learner.py) and `RMInputSettings` (rm/inputs.py) with rm,
    member_rms, rm_dtype, assistant and assistant_prompt."""

    learner: RMLearner | None = None
    _assistant: Assistant | None = None
    exports = {"rm": ("Cooper reward model (VerifyRM)",
                      "coreward.rm.VerifyRM.from_pretrained(PATH)  # or AutoModelForSequenceClassification")}
    _resume_from: Path | None = None

    @staticmethod
    def check_params(p: Any) -> None:
        """The checks of CooperReward.Params (a ValueError names the field first)."""
        from coreward.runtime.assets import resolve_file

        if not p.rm:
            raise ValueError("rm must name an RM directory, a hub id or 'demo'")
        if not isinstance(p.assistant, (str, dict, Assistant)) or not p.assistant:
            raise ValueError(f"assistant must be 'perturb', an endpoint URL, a model path or a generator dict, "
                             f"got {p.assistant!r}")
        LearnerSettings.validate(p)
        p.validate_rm_inputs()  # max_tokens_per_pass (rm/inputs.py)
        for name in ("max_retries", "eval_every"):
            if getattr(p, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(p, name)}")
        if p.eval_every and p.eval_data is None:
            raise ValueError("eval_data is needed with eval_every > 0: 'demo' or a labelled file")
        if p.eval_data is not None:
            resolve_file(p.eval_data, "rm_pairs", key="eval_data")

    def get_learner(self, policy: Any = None) -> RMLearner:
        """The RM and its optimizer, on the policy's device: from the checkpoint when resuming, else from `rm`."""
        if self.learner is None:
            from coreward.rm.sharding import sharding_for

            p = self.params
            device = policy.device if p.device == "auto" and policy is not None else p.device
            sharding = sharding_for(policy) if p.device == "auto" else None  # the policy's engine's (rm/sharding.py)
            if sharding is not None:  # refused before any weights load (the learner checks it too)
                for key in ("param_offload", "max_tokens_per_pass"):
                    if getattr(p, key):
                        raise CorewardError(f"reward {self.name!r}: key {self.config_key}.params.{key}: not supported "
                                            f"for an RM sharded like the policy ({sharding.kind}): set it off, or give "
                                            "the RM a device of its own (`device: cuda:1`), which keeps it whole")
            if self._resume_from is not None:
                self.learner = RMLearner.load(self._resume_from, device, p.rm_dtype, p,
                                              sharding=sharding, rm_options=p.rm_options())
            else:
                rm = VerifyRM.from_pretrained(p.rm, device=device, dtype=p.rm_dtype, batch_size=p.batch_size,
                                              **p.rm_options())  # max_tokens_per_pass, param_offload
                self.learner = RMLearner(rm, p, sharding=sharding)  # p: Params extend LearnerSettings
            self.learner.rm.use_cut(p.rm_cut)
        return self.learner

    def preflight(self) -> None:
        """What Cooper needs, checked before training starts (an error names the key, the path or URL, and the cause):
        the RM to start from, and each of `member_rms` (a co-optimized ensemble's other members), loads (config, weights
        present and whole, tokenizer: `runtime/model_files.py`; one still to build, `demo:1`, is announced first, with
        its time); an LLM assistant on an endpoint answers (down, refusing the key or without the model, Cooper would
        drop every pair and train as a static RM); an assistant given as a local model loads."""
        from coreward.llm.factory import check_endpoint, is_endpoint
        from coreward.runtime.assets import announce_builds
        from coreward.runtime.model_files import check_model

        where, member_rms = f"reward {self.name!r}: key {self.config_key}.params", self.params.member_rms or []
        announce_builds([self.params.rm, *member_rms], "rm", f"reward {self.name!r}")
        check_model(self.params.rm, "rm", key=f"{where}.rm")
        for i, member in enumerate(member_rms):  # resolved as `rm` is (runtime/assets.py)
            check_model(member, "rm", key=f"{where}.member_rms.{i}")
        spec = self.params.assistant
        if not is_endpoint(spec):  # "perturb", a local model (its files checked here), or a built Assistant
            local = spec.get("model_name_or_path") if isinstance(spec, dict) else spec
            if isinstance(local, (str, Path)) and local != "perturb":
                check_model(local, "policy", key=f"{where}.assistant", assets=False)
            return
        check_endpoint(spec, f"{self.name}: its assistant cannot write negatives")

    def get_assistant(self) -> Assistant:
        """Built on first use, on the main process only (the other processes never call it)."""
        if self._assistant is None:
            self._assistant = build_assistant(self.params.assistant, self.params.assistant_prompt)
        return self._assistant

    def save_state(self, directory: Path) -> None:
        from coreward.runtime.distributed import world

        if self.learner is not None and (world()[0] == 0 or self.learner.sharding is not None):
            self.learner.save(Path(directory))  # replicated: one process writes; sharded: all gather, one writes

    def engine_models(self, policy: Any) -> dict[str, Any]:
        """The RM for the engine line printed at start (built now, sharded like the policy)."""
        return {"rm": self.get_learner(policy).rm.model}

    def export_models(self, directory: Path) -> dict[str, Path]:
        """The RM `save_state` wrote in HF format: `VerifyRM.from_pretrained` (or transformers'
        AutoModelForSequenceClassification) loads it."""
        folder = Path(directory) / RM_DIR
        return {"rm": folder} if (folder / "config.json").is_file() else {}

    def load_state(self, directory: Path) -> None:
        """Remember the checkpoint: the RM is loaded from it on first use, on the policy's device."""
        if (Path(directory) / STATE_FILE).is_file():
            self._resume_from = Path(directory)
            self.learner = None

    _eval_rows: list[dict] | None = None

    def evaluate_held_out(self, batch: Any, learner: RMLearner) -> None:
        """Every `eval_every` steps (from the first, and at the run's last so the curve reaches the end): the RM's
        accuracy on the held-out pairs of `eval_data` (rm/evaluate.py), logged through `batch.log`."""
        from coreward.rm.evaluate import evaluate_rm
        from coreward.rm.labelled import read_labelled
        from coreward.runtime.assets import resolve_file

        every = self.params.eval_every
        last = batch.policy is not None and batch.step + 1 == batch.policy.max_steps
        if every and (batch.step % every == 0 or last):
            if self._eval_rows is None:
                self._eval_rows = read_labelled(resolve_file(self.params.eval_data, "rm_pairs", key="eval_data"))
            for name, value in evaluate_rm(learner.rm, self._eval_rows).items():
                batch.log(name, value)

    def close(self) -> None:
        if self._assistant is not None:
            self._assistant.close()
            self._assistant = None
