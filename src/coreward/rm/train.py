"""`coreward rm train`: fit a VerifyRM with binary cross-entropy on labelled verification rows.

    L(θ) = −mean_i [ y_i log σ(f_θ(x_i)) + (1 − y_i) log(1 − σ(f_θ(x_i))) ]      y_i ∈ {0, 1}

Rows carry Cooper's VerifyRM_training_data columns: question, reference_answer, completion, label.
Training runs on HF's `Trainer` (so `accelerate launch` with a DeepSpeed config works unchanged) with
our BCE as `compute_loss_func`; the held-out split is grouped by question (no question on both sides)
and is evaluated every epoch for accuracy, precision, recall and F1. The final model is an HF directory written to a
staging directory and renamed into place. Checkpoints are complete (the model, AdamW's and the scheduler's state, the
RNG states, Trainer's state: what `resume_from_checkpoint` reads) or absent: `COREWARD_COMPLETE` is written last
(runtime/checkpoints.py, as for `coreward train`). `--resume` continues from the newest complete one. The first Ctrl-C
stops after the step in progress with a checkpoint of it; a second stops at once, keeping the newest complete one.

Precision, as for the policy and Cooper's RM (runtime/precision.py): `model.dtype: bfloat16` (or float16) computes
in that dtype through Trainer's mixed precision (its bf16/fp16 autocast) over float32 weights, so AdamW steps float32
weights and `final/` holds them; `model.master_weights: none` loads the weights in `model.dtype` and steps them in
place (the rounding warning says when its learning rate is below half a bf16 step for most weights).
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from coreward.rm.labelled import TEXT_COLUMNS, balance_classes, binary_metrics, read_labelled, split_by_question
from coreward.rm.model import CUTS, format_input
from coreward.runtime.assets import resolve_model
from coreward.runtime.checkpoints import (
    RESUME_IF_ANY,
    checkpoint_step,
    discard,
    last_complete_checkpoint,
    mark_complete,
    rotate_checkpoints,
)
from coreward.runtime.config import check_args_keys, load_config, save_yaml, to_dict
from coreward.runtime.devices import torch_threads
from coreward.runtime.distributed import print_once
from coreward.runtime.errors import CorewardError
from coreward.runtime.files import commit_staging, staging_for
from coreward.runtime.interrupt import Interrupted, count_ctrl_c
from coreward.runtime.precision import is_low_precision, round_away_warning


@dataclass
class RMModelSettings:
    backbone: str = "demo"  # hub id or directory; "demo" = the project's demo policy (a tiny Qwen3)
    dtype: str = "float32"  # what the RM computes in: bfloat16/float16 through Trainer's autocast (its bf16/fp16) over float32 weights, unless master_weights is none
    master_weights: str = "float32"  # float32: AdamW steps float32 weights (a bf16 dtype computes through autocast); none: it steps the dtype's own weights (updates under half a bf16 step round away: warned)
    max_length: int = 1024  # tokens; longer inputs keep their end (the completion's final answer)
    # add the template's tags as whole tokens (for small word-level vocabularies that would read them as <unk>)
    add_template_tokens: bool = False
    cut: str = "coreward"  # input cutting (rm/model.py): "coreward"; "none": no field cut, tokens from the right (the authors')


@dataclass
class RMDataSettings:
    train: str = ""  # a .parquet / .jsonl / .json file with the columns in COLUMNS
    eval: str | None = None  # a separate held-out file; when unset, `eval_fraction` of train's questions
    eval_fraction: float = 0.1
    limit: int | None = None  # use the first `limit` rows of `train` (quick runs)
    # subsample the majority class of the training split to the minority's size (held-out rows are kept as is)
    balance: bool = False
    # drop rows whose template text is longer than this many characters (the authors: 8,000); None keeps all
    max_chars: int | None = None


@dataclass
class RMTrainConfig:
    model: RMModelSettings = field(default_factory=RMModelSettings)
    data: RMDataSettings = field(default_factory=RMDataSettings)
    # any transformers.TrainingArguments field; coreward sets output_dir, seed, evaluation per epoch and whole
    # checkpoints (for --resume); save_strategy (default epoch) and save_total_limit (default 2) are yours
    training: dict = field(default_factory=dict)
    seed: int = 0
    output_dir: str = "runs/rm"
    # CPU threads for torch (None: torch's default). Small models on a shared CPU run fastest on one thread.
    torch_threads: int | None = None

    def validate(self) -> None:
        if not self.data.train:
            raise CorewardError("key data.train: a labelled .parquet or .jsonl file is required")
        if not 0 <= self.data.eval_fraction < 1:
            raise CorewardError(f"key data.eval_fraction must be in [0, 1), got {self.data.eval_fraction}")
        if self.model.master_weights not in ("float32", "none"):
            raise CorewardError(f"key model.master_weights must be 'float32' or 'none', got {self.model.master_weights!r}")
        if self.model.cut not in CUTS:
            raise CorewardError(f"key model.cut must be one of {list(CUTS)}, got {self.model.cut!r}")
        if self.data.max_chars is not None and self.data.max_chars < 1:
            raise CorewardError(f"key data.max_chars must be >= 1, got {self.data.max_chars}")
        _check_training_keys(self.training)


# --------------------------------------------------------------------------- batches, loss, metrics


class Collator:
    """Template + tokenization at batch time, with float labels for BCE."""

    def __init__(self, rm):
        self.rm = rm

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        batch = dict(self.rm.tokenize(*([row[c] for row in rows] for c in TEXT_COLUMNS)))
        batch["labels"] = torch.tensor([float(row["label"]) for row in rows])
        return batch


def bce_loss(outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
    """Sum of per-row BCE over the rows of the whole accumulated batch, divided by their count.

    Trainer counts `num_items_in_batch` over all gradient-accumulation micro-batches (and devices), so
    this is the mean over the optimizer step's batch whatever the accumulation.
    """
    logits = outputs.logits.squeeze(-1).float()
    losses = F.binary_cross_entropy_with_logits(logits, labels.to(logits.device).float(), reduction="sum")
    return losses / (num_items_in_batch if num_items_in_batch is not None else labels.numel())


def compute_metrics(prediction) -> dict[str, float]:
    """Held-out accuracy / precision / recall / F1 at σ(logit) > 0.5, i.e. logit > 0."""
    logits = torch.as_tensor(prediction.predictions).reshape(-1)
    labels = torch.as_tensor(prediction.label_ids).reshape(-1)
    metrics = binary_metrics(labels.round().int().tolist(), (logits > 0).int().tolist())
    return {k: v for k, v in metrics.items() if k in ("accuracy", "precision", "recall", "f1")}


# --------------------------------------------------------------------------- trainer


def _rm_trainer_class():
    """HF Trainer whose model saves are atomic and whose checkpoints are marked complete (imported lazily:
    transformers is slow to import)."""
    from transformers import Trainer

    class RMTrainer(Trainer):
        def save_model(self, output_dir: str, _internal_call: bool = False) -> None:
            """Write to `.NAME.tmp` beside `output_dir`, then rename: a model directory is always whole."""
            target = Path(output_dir)
            staging = target.with_name(f".{target.name}.tmp")
            if self.args.should_save:
                staging = staging_for(target)
            self.accelerator.wait_for_everyone()
            super().save_model(str(staging), _internal_call)
            if self.args.should_save:
                commit_staging(staging, target)
            self.accelerator.wait_for_everyone()

        def _save_checkpoint(self, model, trial) -> None:
            """Trainer's whole checkpoint (model, optimizer, scheduler, RNG, trainer state), then the completeness
            marker, then rotation: a kill at any point leaves the newest complete checkpoint as it was."""
            checkpoint = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            if self.args.should_save and checkpoint.exists():  # a killed attempt's leftover at this step
                discard(checkpoint)
            self.accelerator.wait_for_everyone()
            keep, self.args.save_total_limit = self.args.save_total_limit, None  # Trainer's rotation would run unmarked
            try:
                super()._save_checkpoint(model, trial)
            finally:
                self.args.save_total_limit = keep
            self.accelerator.wait_for_everyone()  # every process's files (RNG states) are written before the marker
            if self.args.should_save:
                mark_complete(checkpoint)
                rotate_checkpoints(checkpoint.parent, keep)
            self.accelerator.wait_for_everyone()

    return RMTrainer


def _ctrl_c_callback():
    """A Trainer callback: the first Ctrl-C stops training after the step in progress, with a checkpoint of it; a
    second raises KeyboardInterrupt at once. Every process stops at the same step (a max all-reduce of the flag)."""
    from transformers import TrainerCallback

    class StopOnCtrlC(TrainerCallback):
        def __init__(self):
            self.received = False
            self.stopped_at: int | None = None  # the step whose checkpoint the first Ctrl-C wrote
            self.previous = None

        def _handle(self, number, frame) -> None:
            count_ctrl_c()
            if self.received:
                raise KeyboardInterrupt
            self.received = True
            print_once("rm train: Ctrl-C: stopping after the current step, with a complete checkpoint (press Ctrl-C "
                       "again to stop at once, keeping the newest complete checkpoint)")

        def on_train_begin(self, args, state, control, **kwargs):
            if threading.current_thread() is threading.main_thread():
                self.previous = signal.signal(signal.SIGINT, self._handle)

        def on_step_end(self, args, state, control, **kwargs):
            if _any_process(self.received):
                control.should_save = control.should_training_stop = True
                self.stopped_at = state.global_step
            return control

        def restore(self) -> None:
            """Put back the handler training replaced (called however training ended)."""
            if self.previous is not None:
                signal.signal(signal.SIGINT, self.previous)
                self.previous = None

    return StopOnCtrlC()


def _any_process(flag: bool) -> bool:
    """Whether `flag` is set on any process (collective under torch.distributed; the flag itself otherwise)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    tensor = torch.tensor([float(flag)], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)


def training_arguments(config: RMTrainConfig, run_dir: Path):
    from transformers import TrainingArguments

    on_gpu = torch.cuda.is_available()
    settings: dict[str, Any] = {
        "learning_rate": 2e-5,
        "num_train_epochs": 3,
        "per_device_train_batch_size": 16,
        "per_device_eval_batch_size": 64,
        "logging_steps": 10,
        "report_to": "none",
        "disable_tqdm": True,
        "use_cpu": not on_gpu,
        "bf16": on_gpu and torch.cuda.is_bf16_supported(),
        "dataloader_num_workers": 0,
        "save_strategy": "epoch",
        # checkpoints hold AdamW's state too (about 3x the model): the newest two are kept, as `coreward train` does
        "save_total_limit": 2,
    }
    dtype = config.model.dtype
    if is_low_precision(dtype):  # the compute dtype model.dtype names (over float32 weights, or its own)
        settings.update(bf16=dtype == "bfloat16", fp16=dtype == "float16")
    settings.update(config.training)
    flag = "bf16" if dtype == "bfloat16" else "fp16"
    if config.model.master_weights == "float32" and is_low_precision(dtype) and not settings.get(flag):
        raise CorewardError(f"key model.dtype={dtype} computes in {flag} through mixed precision (float32 weights, "
                            f"{flag} autocast), but training.{flag} is {settings.get(flag)}: drop training.{flag}, or "
                            "set model.dtype: float32")
    settings.update(
        output_dir=str(run_dir),
        seed=config.seed,
        eval_strategy="epoch" if config.data.eval or config.data.eval_fraction > 0 else "no",
        save_only_model=False,  # whole checkpoints, which --resume continues from (see RMTrainer)
        remove_unused_columns=False,  # the collator needs the text columns
    )
    try:
        return TrainingArguments(**settings)
    except (ValueError, TypeError) as err:
        raise CorewardError(f"key training: {err}") from None


def _check_training_keys(training: dict[str, Any]) -> None:
    from transformers import TrainingArguments

    check_args_keys(TrainingArguments, training, "training",
                    {"output_dir": "the top-level key output_dir", "seed": "the top-level key seed"})




def weights_dtype(settings: RMModelSettings) -> str:
    """The dtype the RM's weights are loaded, stepped and saved in: float32 whatever it computes in, unless
    `master_weights: none` asks AdamW to step `dtype`'s weights themselves."""
    return "float32" if settings.master_weights == "float32" and is_low_precision(settings.dtype) else settings.dtype


def build_rm(settings: RMModelSettings):
    """A fresh VerifyRM on the configured backbone (the device is Trainer's business)."""
    from coreward.rm.model import VerifyRM

    backbone = resolve_model(settings.backbone, "policy", key="model.backbone")
    return VerifyRM.from_backbone(
        backbone, device="cpu", max_length=settings.max_length, dtype=weights_dtype(settings),
        add_template_tokens=settings.add_template_tokens, cut=settings.cut,
    )


def precision_lines(model, args) -> list[str]:
    """What the run's weights are, what AdamW steps and what it computes in; the rounding warning for
    low-precision weights stepped in place."""
    weights = next(model.parameters()).dtype
    compute = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else weights
    name = lambda dtype: str(dtype).removeprefix("torch.")  # noqa: E731
    lines = [f"rm train: precision: weights {name(weights)} (AdamW steps them), compute {name(compute)}"]
    if is_low_precision(weights):
        warning = round_away_warning("the RM", "model.master_weights", model.parameters(), args.learning_rate, weights)
        if warning:
            lines.append(warning)
    return lines


@dataclass
class RMTrainResult:
    run_dir: Path
    final_model: Path
    metrics: dict[str, float]  # held-out metrics of the final model
    train_examples_per_s: float



def train_rm(config: RMTrainConfig, resume: bool | str = False, what: str = "training the RM",
             again: str = "continue with the same `coreward rm train` command and --resume") -> RMTrainResult:
    """Load and split the data, train, evaluate every epoch, save `final/`; metrics go to metrics.jsonl.

    `resume`: True continues from the run directory's newest complete checkpoint (refused when there is none or the
    config differs from the run's); RESUME_IF_ANY continues if there is one, else starts. A Ctrl-C raises
    `Interrupted` whose line says `what` it stopped, which checkpoint is kept and, `again`, how to continue."""
    from transformers import set_seed

    from coreward.runtime.metrics import MetricsFileCallback

    if resume not in (False, True, RESUME_IF_ANY):
        raise CorewardError(f"resume must be True, False or {RESUME_IF_ANY!r}, got {resume!r}")
    rows = read_labelled(config.data.train, config.data.limit)
    if config.data.max_chars is not None:  # the authors' filter: whole template text, before tokenizing
        kept = [r for r in rows if len(format_input(*(r[c] for c in TEXT_COLUMNS), cut="none")) <= config.data.max_chars]
        print(f"rm train: {len(rows) - len(kept)} of {len(rows)} rows over {config.data.max_chars} characters dropped")
        rows = kept
    if config.data.eval:
        train_rows, eval_rows = rows, read_labelled(config.data.eval)
    elif config.data.eval_fraction == 0:  # the authors held nothing out
        train_rows, eval_rows = rows, None
    else:
        train_rows, eval_rows = split_by_question(rows, config.data.eval_fraction, config.seed)
    if config.data.balance:
        train_rows = balance_classes(train_rows, config.seed)
    run_dir = Path(config.output_dir)
    checkpoint = resume_checkpoint(config, run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_yaml(config, run_dir / "config.yaml")

    set_seed(config.seed)
    rm = build_rm(config.model)
    stop = _ctrl_c_callback()
    trainer = _rm_trainer_class()(
        model=rm.model,
        args=training_arguments(config, run_dir),
        train_dataset=train_rows,
        eval_dataset=eval_rows,
        data_collator=Collator(rm),
        processing_class=rm.tokenizer,
        compute_loss_func=bce_loss,
        compute_metrics=compute_metrics,
        callbacks=[MetricsFileCallback(run_dir), stop],
    )
    for line in precision_lines(rm.model, trainer.args):
        print(line)
    if checkpoint is not None:
        print(f"rm train: resuming from {checkpoint} (step {checkpoint_step(checkpoint)} of "
              f"{_max_steps(checkpoint) or '?'})", flush=True)
    try:
        with torch_threads(config.torch_threads):
            output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    except KeyboardInterrupt:  # a second Ctrl-C (or one before training began): at once
        raise Interrupted(what, f"{_kept(run_dir)}; {again}") from None
    finally:
        stop.restore()
    if stop.stopped_at is not None:
        raise Interrupted(what, f"it stopped after step {stop.stopped_at}; {_kept(run_dir)}; {again}")
    trainer.save_model(str(run_dir / "final"))
    evals = [entry for entry in trainer.state.log_history if "eval_accuracy" in entry]
    last_eval = evals[-1] if evals else {}  # the final epoch's; none when nothing was held out
    held_out = {k.removeprefix("eval_"): v for k, v in last_eval.items() if k.startswith("eval_")}
    return RMTrainResult(run_dir, run_dir / "final", held_out, output.metrics.get("train_samples_per_second", 0.0))


def resume_checkpoint(config: RMTrainConfig, run_dir: Path, resume: bool | str) -> Path | None:
    """The checkpoint this run continues from, or None to start; refuses what would mix two runs in one directory."""
    newest = last_complete_checkpoint(run_dir) if run_dir.is_dir() else None
    if not resume:
        if newest is not None:
            raise CorewardError(f"run directory {run_dir} holds a checkpoint of an earlier rm train ({newest.name}): "
                                "pass --resume to continue it, or pick another --output-dir")
        return None
    if newest is None:
        if resume is True:
            raise CorewardError(f"--resume: no complete checkpoint in {run_dir}; nothing to resume (leave out --resume "
                                "to start a run there)")
        return None
    saved = run_dir / "config.yaml"
    if saved.is_file():
        import yaml

        before, now = _flat(yaml.safe_load(saved.read_text()) or {}), _flat(to_dict(config))
        changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
        if changed:
            shown = ", ".join(f"{k} ({before.get(k)!r} -> {now.get(k)!r})" for k in changed[:6])
            raise CorewardError(f"--resume: the config differs from the run's {saved} in {shown}: resume with the "
                                "same config, or start a new --output-dir")
    return newest


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _max_steps(checkpoint: Path) -> int | None:
    import json

    try:
        return json.loads((checkpoint / "trainer_state.json").read_text()).get("max_steps")
    except (OSError, ValueError):
        return None


def _kept(run_dir: Path) -> str:
    """What a stopped run kept: its newest complete checkpoint, or nothing."""
    newest = last_complete_checkpoint(run_dir)
    if newest is None:
        return "no checkpoint of it is kept yet"
    total = _max_steps(newest)
    return f"its checkpoint of step {checkpoint_step(newest)}{f' of {total}' if total else ''} is kept ({newest})"


def train_main(config_path: str | None, overrides: list[str], output_dir: str | None,
               resume: bool | str = False) -> RMTrainResult:
    config = load_config(RMTrainConfig, config_path, overrides)
    if output_dir is not None:
        config.output_dir = output_dir
    command = " ".join(["coreward rm train", *(["--config", config_path] if config_path else []),
                        *(f"--set {item}" for item in overrides), *(["--output-dir", output_dir] if output_dir else []),
                        "--resume"])
    return train_rm(config, resume=resume, again=f"continue with: {command}")
