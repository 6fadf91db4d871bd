"""The step's batch and lengths as the plan counts them: sequences per micro-batch and per generation, each at the
prompts' bound (data.max_prompt_tokens, or the training data's longest prompt) plus the completions' length: the
worst case, grpo.max_completion_length; or, planning from data (`coreward plan --lengths data`), the longest
completion of a step that a run logged (metrics.jsonl `completions/max_length`, the step's longest, which is what a
padded micro-batch holds), at a stated percentile of its steps."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coreward.grpo.config import TrainConfig
from coreward.grpo.plan.settings import grpo_setting
from coreward.runtime.memory import ModelShape


DEFAULT_PROMPT_TOKENS = 256  # the prompts' length where neither data.max_prompt_tokens nor the data says


@dataclass(frozen=True)
class Lengths:
    rows: int  # sequences per micro-batch (grpo.per_device_train_batch_size)
    generation_rows: int  # sequences one generation makes per device (the micro-batch x steps_per_generation)
    seq_len: int  # the prompt's bound plus the completion's, within the policy's positions
    prompt_from_default: bool  # no bound was known: planned at DEFAULT_PROMPT_TOKENS
    prompt_tokens: int = 0
    completion_tokens: int = 0
    completion_from: str = "grpo.max_completion_length"  # where completion_tokens came from

    def describe(self) -> str:
        prompt_from = ("a default: no bound known" if self.prompt_from_default else
                       "data.max_prompt_tokens or the data's longest prompt")
        return (f"prompts {self.prompt_tokens} tokens ({prompt_from}), completions {self.completion_tokens} tokens "
                f"({self.completion_from})")


def step_lengths(config: TrainConfig, policy: ModelShape, prompt_tokens: int | None,
                 completion_tokens: tuple[int, str] | None = None) -> Lengths:
    """`prompt_tokens`: a bound on the prompts' length known from the data (`prompt_token_bound`), with
    data.max_prompt_tokens the smaller. `completion_tokens`: (tokens, where from) to plan at instead of
    grpo.max_completion_length (the longer of the two is never planned)."""
    rows = int(grpo_setting(config, "per_device_train_batch_size", 8))
    steps_per_generation = int(grpo_setting(config, "steps_per_generation", None)
                               or grpo_setting(config, "gradient_accumulation_steps", 1))
    completion = int(grpo_setting(config, "max_completion_length", 512) or 512)
    completion_from = "grpo.max_completion_length"
    if completion_tokens is not None and completion_tokens[0] < completion:
        completion, completion_from = completion_tokens
    prompt = min(n for n in (config.data.max_prompt_tokens, prompt_tokens, 1 << 30) if n is not None)
    from_default = config.data.max_prompt_tokens is None and prompt_tokens is None
    if from_default:
        prompt = DEFAULT_PROMPT_TOKENS
    return Lengths(rows, rows * steps_per_generation, min(prompt + completion, policy.max_position_embeddings),
                   from_default, prompt, completion, completion_from)


def logged_completion_tokens(run_dir: str | Path, percentile: float = 100.0) -> tuple[int, str] | None:
    """The completions' length a run logged: each logged step's longest completion (metrics.jsonl
    `completions/max_length`: the padded length of that step's batch), at `percentile` of the steps (nearest rank;
    100: the longest of all). None when the run logged none."""
    from coreward.runtime.metrics import read_metrics  # the trainer's own reader: a torn last line is skipped

    path = Path(run_dir) / "metrics.jsonl"
    longest = [row["completions/max_length"] for row in read_metrics(path)
               if isinstance(row.get("completions/max_length"), (int, float))]
    if not longest:
        return None
    longest.sort()
    rank = max(1, math.ceil(percentile / 100 * len(longest)))
    tokens = int(math.ceil(longest[rank - 1]))
    which = "the longest" if percentile >= 100 else f"the {percentile:g}th percentile of the steps' longest"
    return tokens, f"{which} completion {path} logged, {len(longest)} steps"


def prompt_token_bound(prompts: Any, tokenizer: Any = None) -> int | None:
    """The prompts' length in tokens, from the training data: with the policy's tokenizer, the longest prompt as the
    trainer will feed it (chat messages through the tokenizer's template, its default system prompt included; the
    64 longest in characters are tokenized, among which the longest in tokens is); without one (before it can be
    read), an upper bound: the longest prompt's characters (a token holds at least one), plus 16 per chat message for
    its template. None without prompts."""
    def characters(prompt: Any) -> int:
        if isinstance(prompt, str):
            return len(prompt)
        if isinstance(prompt, list):
            return sum(len(str(m.get("content", ""))) + 16 for m in prompt if isinstance(m, dict))
        return 0

    prompts = list(prompts)
    longest = max(map(characters, prompts), default=0)
    if not longest or tokenizer is None:
        return longest or None
    candidates = sorted((p for p in prompts if characters(p)), key=characters, reverse=True)[:64]
    try:
        texts = [p if isinstance(p, str) else tokenizer.apply_chat_template(p, tokenize=False,
                                                                            add_generation_prompt=True)
                 for p in candidates]
        return max(len(tokenizer(text, add_special_tokens=False).input_ids) for text in texts)
    except (ValueError, TypeError, KeyError):  # no chat template, an odd row: the bound still holds
        return longest


def data_tokenizer(model_path: str, trust_remote_code: bool = False):
    """The policy's tokenizer where it can be read without a download (a local folder, the hub's cache), else None:
    the plan then bounds prompts by their characters."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None
