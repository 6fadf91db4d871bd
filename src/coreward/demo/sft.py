"""Supervised warm start of the demo policy with TRL's SFTTrainer.

GRPO needs a policy that already solves the task some of the time: a group whose rollouts are all wrong
(or all right) has zero advantage and teaches nothing. This trains the small demo model from scratch on
prompt-completion pairs (prompt = the bare question, completion = worked solution + EOS, loss on the
completion only) and stops early on purpose: the default budget (700 steps of 64) leaves the policy right on part
of its temperature-1.0 samples, fewer still by the rule verifier's count, so RL has room to improve it
(docs/tutorials/demo.md).

Solutions end in a mix of answer formats (`answer_formats`), a minority of which the rule verifier does
not recognise; `sft_metrics.json` reports held-out accuracy both as the verifier sees it and as it is.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback, set_seed

from coreward.data.synthetic import (
    ANSWER_FORMATS,
    DemoProblem,
    demo_answer_format,
    demo_answer_in_any_format,
    demo_problems,
)
from coreward.demo.model import build_demo_model, build_demo_tokenizer
from coreward.grpo.sft import run_sft, sft_config
from coreward.runtime.config import load_config, save_yaml
from coreward.runtime.devices import torch_threads
from coreward.runtime.errors import CorewardError
from coreward.runtime.generation import generate_from_ids


@dataclass
class DemoSFTConfig:
    """Settings of a demo SFT run. configs/demo/sft.yaml mirrors these defaults, so no file is needed."""

    output_dir: str = "runs/demo_sft"
    seed: int = 0
    # model (see build_demo_model)
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 384
    # data: the first `train_size` train problems, each with a final-answer format drawn from the mix
    train_size: int = 20_000
    answer_formats: dict[str, float] = field(default_factory=lambda: {"hash": 0.5, "boxed": 0.33, "ans": 0.17})
    # optimisation. A constant rate (after warmup) makes the run to step N the same whatever max_steps is,
    # so one run with periodic evaluation picks max_steps. Batch 64 reached a given accuracy with fewer examples
    # than batch 128.
    max_steps: int = 700
    batch_size: int = 64
    learning_rate: float = 3e-3
    adam_beta2: float = 0.95
    lr_scheduler: str = "constant_with_warmup"
    warmup_steps: int = 20
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    logging_steps: int = 25
    report_to: str = "none"
    # CPU threads for torch (None: torch's default, one per core). When other jobs share the cores, 1 thread
    # is several times faster than oversubscribed spinning OpenMP threads.
    torch_threads: int | None = None
    # held-out evaluation on the test split: greedy, and `eval_samples` samples per problem at `eval_temperature`
    eval_size: int = 500
    eval_samples: int = 4
    eval_temperature: float = 1.0
    max_new_tokens: int = 40

    def validate(self) -> None:
        unknown = sorted(set(self.answer_formats) - set(ANSWER_FORMATS))
        if unknown:
            known = ", ".join(ANSWER_FORMATS)
            raise CorewardError(f"answer_formats: unknown format {', '.join(unknown)} (known: {known})")
        if not self.answer_formats or min(self.answer_formats.values()) < 0 or sum(self.answer_formats.values()) <= 0:
            raise CorewardError("answer_formats: weights must be non-negative and not all zero")
        for key in ("train_size", "max_steps", "batch_size", "eval_size", "eval_samples", "max_new_tokens"):
            if getattr(self, key) < 1:
                raise CorewardError(f"{key} must be at least 1, got {getattr(self, key)}")


def sft_dataset(config: DemoSFTConfig) -> Dataset:
    """Prompt-completion rows; each solution's answer format is drawn (seeded) from `answer_formats`."""
    problems = demo_problems("train")[: config.train_size]
    rng = random.Random(config.seed)
    formats = rng.choices(list(config.answer_formats), weights=list(config.answer_formats.values()), k=len(problems))
    return Dataset.from_dict(
        {
            "prompt": [p.question() for p in problems],
            "completion": [p.solution(fmt) for p, fmt in zip(problems, formats)],
        }
    )


def trl_args(config: DemoSFTConfig, output_dir: Path):
    """TRL's SFTConfig for a CPU run: fp32, no gradient checkpointing, no intermediate checkpoints."""
    return sft_config(
        output_dir=str(output_dir),
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        adam_beta2=config.adam_beta2,
        lr_scheduler_type=config.lr_scheduler,
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        logging_steps=config.logging_steps,
        report_to=config.report_to,
        seed=config.seed,
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        completion_only_loss=True,
        max_length=128,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


class _PrintProgress(TrainerCallback):
    """One line per logging step: step, loss, elapsed seconds and the time left at the pace so far (the CLI has no
    progress bar)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            elapsed = time.perf_counter() - self.start
            left = elapsed / max(state.global_step, 1) * (state.max_steps - state.global_step)
            print(f"sft step {state.global_step}/{state.max_steps}  loss {logs['loss']:.4f}  "
                  f"{elapsed:.0f}s, about {left:.0f}s left", flush=True)


@torch.no_grad()
def generate_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    questions: list[str],
    max_new_tokens: int,
    temperature: float | None = None,
) -> list[str]:
    """Completions of plain-text prompts: greedy when `temperature` is None, else pure sampling (no top-k/p)."""
    prompt_ids = tokenizer(questions, add_special_tokens=False)["input_ids"]
    sampling = {"do_sample": False}
    if temperature:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    rows = generate_from_ids(model, prompt_ids, tokenizer.pad_token_id, max_new_tokens=max_new_tokens, **sampling)
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def score(completions: list[str], problems: list[DemoProblem]) -> dict[str, float]:
    """Accuracy as the rule verifier sees it (strict formats) and as it is (any demo format)."""
    from coreward.verify import extract_answer

    golds = [str(p.answer) for p in problems]
    verified = sum(extract_answer(c) == gold for c, gold in zip(completions, golds))
    true = sum(demo_answer_in_any_format(c) == gold for c, gold in zip(completions, golds))
    formats = Counter(str(demo_answer_format(c)) for c in completions)
    return {
        "verified": verified / len(golds),
        "true": true / len(golds),
        "answer_formats": {name: count / len(golds) for name, count in sorted(formats.items())},
    }


def evaluate_policy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: DemoSFTConfig) -> dict:
    """Greedy and sampled held-out accuracy on the first `eval_size` test problems."""
    problems = list(demo_problems("test")[: config.eval_size])
    questions = [p.question() for p in problems]
    greedy = generate_completions(model, tokenizer, questions, config.max_new_tokens)
    torch.manual_seed(config.seed)  # the same samples whatever ran before
    sampled = generate_completions(
        model, tokenizer, questions * config.eval_samples, config.max_new_tokens, config.eval_temperature
    )
    return {
        "eval_size": len(problems),
        "greedy": score(greedy, problems),
        f"sampled_t{config.eval_temperature:g}": score(sampled, problems * config.eval_samples),
        "example_completion": sampled[0],
    }


def sft_main(config_path: str | None, overrides: list[str] | None = None, output_dir: str | None = None) -> Path:
    """Warm-start the demo policy; save model, tokenizer, resolved config and sft_metrics.json in the output dir.

    `output_dir` (the CLI's --output-dir) wins over the config's `output_dir`. sft_metrics.json is written
    last, so its presence marks a complete run.
    """
    config = load_config(DemoSFTConfig, config_path, overrides)
    if output_dir is not None:
        config.output_dir = output_dir
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_yaml(config, out / "sft_config.yaml")
    with torch_threads(config.torch_threads):
        model, tokenizer, trainer_metrics = train_policy(config, out)
        start = time.perf_counter()
        metrics = {**trainer_metrics, **evaluate_policy(model, tokenizer, config)}
        metrics["eval_time_s"] = round(time.perf_counter() - start, 1)
    (out / "sft_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    accuracy = {k: v for k, v in metrics.items() if k in ("greedy", f"sampled_t{config.eval_temperature:g}")}
    print(f"sft: done in {metrics['train_time_s']:.0f}s; held-out accuracy {json.dumps(accuracy)}", flush=True)
    return out


def train_policy(config: DemoSFTConfig, out: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]:
    """Build the tokenizer and a fresh model, run SFTTrainer, save both to `out`; returns them and run facts."""
    set_seed(config.seed)
    tokenizer = build_demo_tokenizer()
    model = build_demo_model(
        tokenizer, config.seed, config.hidden, config.layers, config.heads, config.kv_heads, config.intermediate
    )
    print(f"sft: {model.num_parameters():,} parameters, {config.max_steps} steps of {config.batch_size}", flush=True)
    start = time.perf_counter()
    state = run_sft(model, tokenizer, sft_dataset(config), trl_args(config, out), callbacks=[_PrintProgress()])
    train_time = time.perf_counter() - start
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    facts = {
        "steps": state.global_step,
        "train_time_s": round(train_time, 1),
        "torch_threads": torch.get_num_threads(),
        "parameters": model.num_parameters(),
        "losses": [entry["loss"] for entry in state.log_history if "loss" in entry],
    }
    return model, tokenizer, facts
