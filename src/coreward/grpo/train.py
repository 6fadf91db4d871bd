"""`coreward train`: build the dataset, the policy and the reward sources from a config, then run GRPO.

Order matters for bad input: the config and the data are checked before any model loads, so a typo
costs a second, not a model download.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coreward.data.prompts import INSTRUCTION
from coreward.grpo.config import TrainConfig, check_batch_fits, declared, declared_needs, weights_dtype
from coreward.runtime.assets import resolve_model
from coreward.runtime.devices import load_tokenizer
from coreward.runtime.distributed import print_once
from coreward.runtime.errors import CorewardError
from coreward.runtime.model_files import check_model
from coreward.runtime.progress import is_terminal


@dataclass
class TrainResult:
    run_dir: Path
    final_model: Path
    global_step: int
    trainer: Any
    preempted: bool = False  # stopped by a preemption signal: a checkpoint of `global_step`, no final model
    stopped_by: str | None = None  # with `preempted`: "Ctrl-C" or "a preemption signal (SIGTERM)"
    guard_stopped: bool = False  # stopped by the overoptimization guard (guard.stop: true); final/ is written


def resolve_prompt_format(config: TrainConfig) -> TrainConfig:
    """`data.prompt_format: null` made concrete: "plain" (and no instruction, unless one was set) for a model that
    reads bare text -- the demo policy and models trained from it, recognised by their chat template, as
    `coreward eval` does -- else "chat". Decided before any model loads: from the name or the saved tokenizer files."""
    from dataclasses import replace

    if config.data.prompt_format is not None:
        return config
    plain = _reads_plain_text(config.model.name_or_path)
    data = replace(config.data, prompt_format="plain" if plain else "chat")
    if plain and data.instruction == INSTRUCTION:  # the \boxed{} request is words the demo vocabulary lacks
        data = replace(data, instruction=None)
    return replace(config, data=data)


def _reads_plain_text(name_or_path: str) -> bool:
    import json

    from coreward.data.prompts import PLAIN_CHAT_TEMPLATE
    from coreward.runtime.assets import is_asset, shipped_path

    path = shipped_path(name_or_path, "policy") if is_asset(name_or_path) else Path(name_or_path).expanduser()
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text() == PLAIN_CHAT_TEMPLATE
    try:
        return json.loads((path / "tokenizer_config.json").read_text()).get("chat_template") == PLAIN_CHAT_TEMPLATE
    except (OSError, ValueError):  # a hub id (can't be looked at before it is downloaded): a chat model
        return False


def build_train_dataset(config: TrainConfig):
    """The training dataset (`data/rows.py`), its references checked for the configured rewards, with the paired
    views or teacher prompts they ask for (`RewardSource.data_needs`)."""
    from coreward.data.rows import Rephrasings
    from coreward.data.rows import build_train_dataset as build

    needs = declared_needs(config.rewards)
    paired, teacher = (declared(needs, need) for need in ("rephrasings", "teacher_rephrasings"))
    return build(config.data, reference_users(config), _reference_free_methods(),
                 paired=Rephrasings(*paired) if paired else None, teacher=Rephrasings(*teacher) if teacher else None)


def reference_users(config: TrainConfig) -> list[str]:
    """The configured rewards that score completions against the reference answers (`needs_references`)."""
    from coreward.rewards import source_class

    return [spec.name for spec in config.rewards if source_class(spec.name).needs_references]


def _reference_free_methods() -> str:
    """The built-in methods that need no reference answer, for an error message: "a, b and c"."""
    from coreward.rewards import builtin_methods

    names = [cls.name for cls in builtin_methods() if not cls.needs_references]
    return ", ".join(names[:-1]) + " and " + names[-1]


def build_sources(config: TrainConfig):
    """One source per `rewards` entry, of the Params its config validation parsed; an error names the entry."""
    from coreward.rewards import build_source

    return [build_source(spec.name, spec.parsed_params(f"rewards.{i}"), key=f"rewards.{i}")
            for i, spec in enumerate(config.rewards)]


# transformers' interval strategies, whose values are "no", "steps", "epoch" (and "best" for saving)
STRATEGY_KEYS = ("save_strategy", "eval_strategy", "logging_strategy")


def build_grpo_args(config: TrainConfig, run_dir: Path, max_steps: int | None):
    import torch
    from trl import GRPOConfig

    from coreward.grpo.compat import checkpointing_settings
    from coreward.grpo.engines import launcher_precision
    from coreward.runtime.precision import mixed_precision_flags

    on_gpu = torch.cuda.is_available()
    precision = launcher_precision()  # `accelerate launch`'s mixed_precision: DeepSpeed/FSDP configs need agreement
    flags = mixed_precision_flags(config.model.dtype, precision, on_gpu and torch.cuda.is_bf16_supported())
    settings: dict[str, Any] = {
        "logging_steps": 1,
        # on a terminal the progress bar, whatever the logging level (quiet libraries raise it); anywhere else (a log
        # file, a pipe, a cluster job's output) one line per step: a bar redrawn into a file leaves a copy per redraw
        "disable_tqdm": not is_terminal(sys.stderr),
        "save_strategy": "steps",
        "save_steps": 50,
        "report_to": ["tensorboard"],
        "remove_unused_columns": False,
        "activation_checkpointing": on_gpu,
        **flags,
        "use_cpu": not on_gpu,
        "model_init_kwargs": {"dtype": weights_dtype(config.model, config.lora.enabled)},
    }
    if config.model.attn_implementation:
        settings["model_init_kwargs"]["attn_implementation"] = config.model.attn_implementation
    settings.update(config.grpo)
    for key in STRATEGY_KEYS:  # YAML reads transformers' "no" (never), written bare, as False
        if settings.get(key) is False:
            settings[key] = "no"
    settings.pop("resume_from_checkpoint", None)  # read by run_training: the same path as --resume
    if settings.get("hub_token"):  # TRL pickles its args into every checkpoint: the token goes where the hub reads it
        os.environ["HF_TOKEN"] = settings.pop("hub_token")
    settings = checkpointing_settings(settings)  # either spelling, as the installed transformers names it
    settings.update(
        output_dir=str(run_dir),
        seed=config.seed,
        reward_weights=[spec.weight for spec in config.rewards],
        # TRL would delete checkpoints before coreward marks them complete: coreward rotates them itself,
        # keeping grpo.save_total_limit complete ones (keep_checkpoints)
        save_total_limit=None,
    )
    if max_steps is not None:
        settings["max_steps"] = max_steps
    check_precision(settings, precision, on_gpu)
    check_mixed_precision(config.model, settings, precision)
    try:
        return GRPOConfig(**settings)
    except (ValueError, TypeError) as err:
        raise CorewardError(f"invalid grpo settings: {err}") from None


def check_mixed_precision(model, settings: dict[str, Any], precision: str | None) -> None:
    """A low-precision model.dtype with float32 weights computes through the trainer's bf16/fp16 flag: it must be on."""
    from coreward.runtime.precision import is_low_precision

    if model.master_weights != "float32" or not is_low_precision(model.dtype):
        return
    flag = "bf16" if model.dtype == "bfloat16" else "fp16"
    if not settings.get(flag):
        where = (f"the accelerate config's mixed_precision is {precision!r}" if precision
                 else f"grpo.{flag}={settings.get(flag)}")
        raise CorewardError(f"model.dtype={model.dtype} computes in {flag} through mixed precision (float32 weights, "
                            f"{flag} autocast), but {where}: set mixed_precision: {flag} (grpo.{flag}: true), or "
                            "model.dtype: float32")


def check_precision(settings: dict[str, Any], precision: str | None, on_gpu: bool) -> None:
    """The trainer's bf16/fp16 must be the launcher's mixed precision (DeepSpeed checks it mid-start-up)."""
    import torch

    if precision in ("bf16", "fp16", "no"):
        for flag in ("bf16", "fp16"):
            if bool(settings.get(flag)) != (precision == flag):
                raise CorewardError(
                    f"grpo.{flag}={settings.get(flag)} disagrees with the launcher's mixed_precision={precision!r} "
                    f"(accelerate config): drop grpo.{flag} or change the accelerate config"
                )
    if settings.get("bf16") and on_gpu and not torch.cuda.is_bf16_supported():
        raise CorewardError("bf16 was asked for (grpo.bf16 or the accelerate config's mixed_precision) but this GPU "
                            "does not support it: use an accelerate config with mixed_precision: fp16 or 'no'")


def build_peft_config(config: TrainConfig):
    if not config.lora.enabled:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=config.lora.target_modules,
        task_type="CAUSAL_LM",
    )


def keep_checkpoints(config: TrainConfig) -> int | None:
    """How many complete checkpoints rotation keeps: grpo.save_total_limit (null: all), else coreward's 2."""
    from coreward.grpo.config import DEFAULT_SAVE_TOTAL_LIMIT

    return config.grpo.get("save_total_limit", DEFAULT_SAVE_TOTAL_LIMIT)


def final_complete(run_dir: Path) -> bool:
    """Whether the run's final model was written whole (its completeness marker is written last)."""
    from coreward.grpo.checkpoints import COMPLETE_MARKER

    return (run_dir / "final" / COMPLETE_MARKER).is_file()


def resume_checkpoint(config: TrainConfig, run_dir: Path, resume: bool | str) -> Path | None:
    """The checkpoint to resume from: grpo.resume_from_checkpoint (a complete checkpoint), else with --resume
    the newest complete one of the run."""
    from coreward.grpo.checkpoints import COMPLETE_MARKER, last_complete_checkpoint

    given = config.grpo.get("resume_from_checkpoint")
    if given:
        path = Path(given)
        if not (path / COMPLETE_MARKER).is_file():
            raise CorewardError(f"key grpo.resume_from_checkpoint: {path} is not a complete coreward checkpoint "
                                f"(no {COMPLETE_MARKER} in it)")
        return path
    return last_complete_checkpoint(run_dir) if resume else None


def run_training(
    config: TrainConfig,
    output_dir: str | None = None,
    max_steps: int | None = None,
    resume: bool | str = False,
    extra_callbacks: list | None = None,
    allow_config_change: bool = False,
    plan_check: bool = True,
) -> TrainResult:
    """Train one job, `config` (its one settings object: `grpo.config.as_train_config` makes it from a path, a
    mapping and `--set` items). The engine behind both entries: `coreward train` and `coreward.train(...)`.
    `resume`: True continues from the run's newest complete checkpoint and refuses a directory without one
    (`--resume`); "if_any" (`runtime/checkpoints.py` `RESUME_IF_ANY`, `--resume-if-any`) continues if there is one, else starts.
    `plan_check`: on a GPU, a run whose memory plan (grpo/plan/) exceeds the device is refused before any weights
    load; false trains anyway (`--no-plan-check`)."""
    from dataclasses import replace

    from coreward.grpo.periodic_eval import load_eval_records
    from coreward.grpo.run_dir import RunLock
    from coreward.runtime.checkpoints import RESUME_IF_ANY
    from coreward.runtime.faults import FAULT_ENV, parse_faults

    if resume not in (False, True, RESUME_IF_ANY):
        raise CorewardError(f"resume must be True, False or {RESUME_IF_ANY!r}, got {resume!r}")
    run_dir = Path(output_dir or config.output_dir)
    config = resolve_prompt_format(replace(config, output_dir=str(run_dir)))  # config.yaml: what this run used

    parse_faults(os.environ.get(FAULT_ENV))  # a malformed kill point fails now, not mid-run
    dataset = build_train_dataset(config)  # bad data fails here, before any model loads
    eval_records = load_eval_records(config.data)
    sources = build_sources(config)
    for source in sources:  # an endpoint that is down, a wrong model name: exit 2 now, not a run that is something else
        source.preflight()
    args = build_grpo_args(config, run_dir, max_steps)
    check_batch_fits(len(dataset), args, f"in {config.data.train}")
    resume_checkpoint(config, run_dir, resume)  # a bad grpo.resume_from_checkpoint fails before any model path check
    model_path = resolve_model(config.model.name_or_path, "policy", key="key model.name_or_path")
    check_model(model_path, "policy", key="key model.name_or_path", trust_remote_code=config.model.trust_remote_code)
    from coreward.grpo.plan import data_tokenizer, plan_before_loading, prompt_token_bound

    prompts = (prompt_token_bound(dataset["prompt"], data_tokenizer(model_path, config.model.trust_remote_code))
               if "prompt" in dataset.column_names else None)
    memory_line, plan = plan_before_loading(config, plan_check, prompt_tokens=prompts)  # over a GPU's: exit 2 here
    print_once(memory_line)
    lock = RunLock(run_dir, enabled=int(os.environ.get("RANK", "0")) == 0)  # one writer: the main process holds it
    created = not run_dir.exists()
    try:
        with lock:
            return _locked_run(config, run_dir, lock, args, resume, max_steps, dataset, eval_records, sources,
                               model_path, extra_callbacks, allow_config_change, plan)
    except BaseException as err:
        from coreward.grpo.health import SUMMARY_FILE
        from coreward.runtime.user_code import UserCodeError

        trained = (run_dir / SUMMARY_FILE).is_file()  # training started: health.json says how it went, and why it stopped
        if created and lock.enabled and not trained:
            remove_if_no_work(run_dir)
        if isinstance(err, UserCodeError) and trained:
            raise err.with_where(f"(the run directory {run_dir} is kept, with {SUMMARY_FILE})") from err.error
        raise


def remove_if_no_work(run_dir: Path) -> None:
    """Remove a run directory this run created when it failed before any step was logged or saved: a failed start
    (a model id that can't be loaded, a bad setting TRL refuses) leaves no folder holding only config.yaml and .lock."""
    import shutil

    if not (run_dir / "metrics.jsonl").exists() and not any(run_dir.glob("checkpoint-*")):
        shutil.rmtree(run_dir, ignore_errors=True)


def _locked_run(config, run_dir, lock, args, resume, max_steps, dataset, eval_records, sources, model_path,
                extra_callbacks, allow_config_change, plan=None) -> TrainResult:
    """The part of `run_training` that holds the run directory's lock (`plan`: its memory plan, or None)."""
    from coreward.grpo.checkpoints import checkpoint_step
    from coreward.grpo.run_dir import check_resume_config, check_something_to_resume, save_config

    checkpoint = resume_checkpoint(config, run_dir, resume)  # under the lock: what no other writer changes
    if checkpoint is None and lock.enabled:  # the main process decides (other machines may not see the directory)
        check_something_to_resume(run_dir, resume, lock.created)
    resume = bool(resume) or checkpoint is not None
    done = checkpoint_step(checkpoint) if checkpoint is not None else 0
    if not resume and (run_dir / "metrics.jsonl").exists():
        from coreward.grpo.checkpoints import last_complete_checkpoint

        if last_complete_checkpoint(run_dir) is None:  # nothing --resume could continue from
            raise CorewardError(f"run directory {run_dir} already holds a run with no complete checkpoint: pass "
                                "--resume-if-any (coreward.train(..., resume='if_any')) to start it again there, or "
                                "pick another --output-dir")
        raise CorewardError(f"run directory {run_dir} already holds a run: pass --resume (coreward.train(..., "
                            "resume=True)) to continue it" + (" with a larger --max-steps" if final_complete(run_dir)
                                                               else "") + ", or pick another --output-dir")
    if resume and checkpoint is not None and done >= args.max_steps > 0 and final_complete(run_dir):
        print_once(f"--resume: the run in {run_dir} already finished step {done} of {args.max_steps}; "
                   f"nothing to do (final model: {run_dir / 'final'})")
        for source in sources:
            source.close()
        return TrainResult(run_dir=run_dir, final_model=run_dir / "final", global_step=done, trainer=None)
    if resume and checkpoint is None:
        print_once(f"--resume-if-any: no complete checkpoint in {run_dir}, starting from the beginning")
    elif resume:
        print_once(f"--resume: continuing from {checkpoint}")
    run_dir.mkdir(parents=True, exist_ok=True)
    if resume and lock.enabled:
        check_resume_config(run_dir, config, allow_config_change, done)
    if lock.enabled:
        save_config(config, run_dir / "config.yaml")
    import torch

    threads = torch.get_num_threads()
    try:
        return _train(config, run_dir, args, dataset, eval_records, sources, checkpoint, model_path, extra_callbacks,
                      plan)
    finally:  # the run's own thread count (torch_threads, or the one picked) ends with it: a caller's stays its own
        torch.set_num_threads(threads)


def threads_report(configured: int | None, model) -> str:
    """Pick the torch threads when the config leaves `torch_threads` unset (runtime/devices.py
    `pick_torch_threads`: the cores other jobs leave idle), and say what the run uses, for its log."""
    import os

    import torch

    from coreward.runtime.devices import idle_cores, pick_torch_threads

    if configured:
        return f"threads: {torch.get_num_threads()} torch thread(s) per process (torch_threads: {configured})"
    parameters = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())  # ZeRO-3: whole sizes
    device = next(model.parameters()).device.type
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    threads, why = pick_torch_threads(parameters, device, idle_cores() if device == "cpu" else None, processes)
    if threads:
        torch.set_num_threads(threads)
    return f"threads: {torch.get_num_threads()} torch thread(s) per process, picked ({why}; set torch_threads to choose)"


def _train(config, run_dir, args, dataset, eval_records, sources, checkpoint, model_path, extra_callbacks,
           plan=None) -> TrainResult:
    """Build the trainer and run it (the run directory is locked and its config written; `plan`: the memory plan
    its measured peak is recorded beside, in memory.json)."""
    import torch

    from coreward.grpo.checkpoints import agree_on_checkpoint, checkpoint_step, discard, mark_complete
    from coreward.grpo.periodic_eval import add_periodic_eval
    from coreward.grpo.preemption import PreemptionCallback, signal_numbers
    from coreward.grpo.trainer import CorewardGRPOTrainer
    from coreward.runtime.metrics import MetricsFileCallback, close_progress, use_compact_progress, use_run_tensorboard
    from coreward.runtime.user_code import as_user_code_error
    from coreward.verify import Verifier

    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    if not torch.cuda.is_available():  # a CPU run: its tensors are the host's memory
        from coreward.runtime.host_memory import hold_mmap_threshold

        held = hold_mmap_threshold(config.host_mmap_threshold)  # before any weights load
        if held:
            print_once(held)
    tokenizer = load_tokenizer(model_path, config.model.trust_remote_code, key="key model.name_or_path")

    if config.data.max_prompt_tokens:
        from coreward.data.rows import drop_long_prompts
        from coreward.grpo.trainer import has_paired_views

        dataset = drop_long_prompts(dataset, tokenizer, config.data.max_prompt_tokens, has_paired_views(dataset))
        check_batch_fits(len(dataset), args, f"of at most data.max_prompt_tokens={config.data.max_prompt_tokens} tokens")
    verifier = Verifier(timeout_s=config.verifier.timeout_s, num_workers=config.verifier.num_workers,
                        max_completion_chars=config.verifier.max_completion_chars)
    metrics_callback = MetricsFileCallback(run_dir)
    trainer = CorewardGRPOTrainer(
        model=model_path,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=build_peft_config(config),
        reward_sources=sources,
        verifier=verifier,
        reference_column=config.data.reference_column,
        keep_checkpoints=keep_checkpoints(config),
        kl_from_init=config.kl_from_init,
        kl_from_init_estimator=config.kl_from_init_estimator,
        sampling=(config.sampling.engine, config.sampling.dtype),
        micro_batches=config.micro_batches,
        callbacks=[metrics_callback, *(extra_callbacks or [])],
    )
    # TRL writes its own model card to the run root at every checkpoint ("fine-tuned version of [None]" for a model
    # given by path); the run's card is final/README.md (publish.write_model_card)
    trainer.create_model_card = lambda *args, **kwargs: None
    print_once(threads_report(config.torch_threads, trainer.accelerator.unwrap_model(trainer.model)))
    from coreward.grpo.engines import precision_report

    for line in precision_report(trainer, config.model.master_weights):
        print_once(line)
    trainer.add_callback(short_completions_warning())
    from coreward.grpo.health import HealthCallback

    health = HealthCallback(run_dir, [watch for source in trainer.reward_sources for watch in source.health_watches()])
    trainer.add_callback(health)  # invariants watched per step; health.json at the end
    from coreward.grpo.guard import add_guard

    # overoptimization alarm and best/, on the verified signal the run has (it says which)
    guard = add_guard(trainer, config.guard, run_dir, tokenizer, eval_records, config.data.eval_n,
                      Path(config.data.eval).stem if config.data.eval else "")
    use_compact_progress(trainer)
    use_run_tensorboard(trainer, run_dir / "tensorboard", checkpoint_step(checkpoint) if checkpoint else None)
    if eval_records is not None:
        add_periodic_eval(trainer, config.data, seed=config.seed, records=eval_records)
    preemption = PreemptionCallback(signal_numbers(config.preempt_signals))
    trainer.add_callback(preemption)
    final = run_dir / "final"
    try:
        agree_on_checkpoint(checkpoint, run_dir)  # several machines: one shared run directory, one starting point
        if final.exists() and trainer.accelerator.is_main_process:
            discard(final)  # an incomplete final/ (killed while it was written) is written again whole
        trainer.accelerator.wait_for_everyone()
        if checkpoint is not None and checkpoint_step(checkpoint) >= args.max_steps > 0:
            # every step is done (a run preempted, or killed, after its last checkpoint): the final model is built
            # from that checkpoint, not by training on (which would run a step past the requested ones)
            trainer._load_from_checkpoint(str(checkpoint))
            trainer.load_sources(checkpoint)
            trainer.state.global_step = checkpoint_step(checkpoint)
        else:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        from coreward.grpo.measured_memory import record_memory

        # each process its own file (no collective): before the final save, whose gathers are no training step's
        print_once(record_memory(run_dir, plan, trainer.state.global_step,
                                 "preemption" if preemption.preempted_at is not None else "end"))
        if preemption.preempted_at is not None:  # its checkpoint is complete; the final model comes on resume
            trainer.accelerator.wait_for_everyone()  # no process exits (and has torchrun stop the others) early
            return TrainResult(run_dir=run_dir, final_model=final, global_step=trainer.state.global_step,
                               trainer=trainer, preempted=True, stopped_by=preemption.stopped_by)
        from coreward.grpo.publish import export_source_models, write_model_card

        trainer.save_model(str(final))
        if trainer.accelerator.is_main_process:
            tokenizer.save_pretrained(str(final))
        trainer.save_sources(final)  # every process: a sharded teacher is gathered collectively
        if trainer.accelerator.is_main_process:
            export_source_models(sources, final, tokenizer)  # the models the sources learnt: loadable folders
            write_model_card(run_dir)
            mark_complete(final)  # last: a final/ without it (a kill while writing) is rebuilt on --resume
    except BaseException as err:  # a run stopped by an error (a broken invariant, the user's reward) says how it went
        close_progress(trainer)  # the lines after it start below the bar, and stdout is the process's again
        if not isinstance(err, Exception):  # a second Ctrl-C: grpo/cli.py says so
            raise
        user = as_user_code_error(err)
        if user is not None:  # one line naming their function (runtime/commands.py shows their frames)
            user = user.with_where(f"during step {trainer.state.global_step + 1}")
        health.stopped_by(user or err, trainer.state)
        if user is not None:
            raise user from err
        raise
    finally:
        preemption.restore()  # a run that raised never reached on_train_end: a caller's Ctrl-C is its own again
        for source in sources:
            source.close()
        verifier.close()
    return TrainResult(run_dir=run_dir, final_model=final, global_step=trainer.state.global_step, trainer=trainer,
                       guard_stopped=guard is not None and guard.stopped_at is not None)


SHORT_COMPLETION_TOKENS = 2


def short_completions_warning():
    """A callback that says so, once, when every completion of a logged step is at most SHORT_COMPLETION_TOKENS
    tokens long: the policy ends its answer at once (a prompt it can't read, e.g. a chat prompt with the \\boxed{}
    instruction for the demo policy), and no reward can teach it anything."""
    from transformers import TrainerCallback

    class ShortCompletionsWarning(TrainerCallback):
        warned = False

        def on_log(self, args, state, control, logs=None, **kwargs):
            longest = (logs or {}).get("completions/max_length")
            if longest is not None and longest <= SHORT_COMPLETION_TOKENS and not self.warned:
                self.warned = True
                print_once(f"warning: every completion of step {state.global_step} is at most "
                           f"{SHORT_COMPLETION_TOKENS} tokens long: the policy ends its answer at once. Check "
                           "data.prompt_format and data.instruction for this model (the demo policy reads plain "
                           "prompts with no instruction) and grpo.max_completion_length")

    return ShortCompletionsWarning()

