"""What Cooper gives the RM and the assistant for a rollout, two ways each (CooperReward's `question` and
`negative_form` options; docs/reference/paper-settings.md).

Question field:
  * "question" (coreward's): the dataset's bare question;
  * "prompt" (the authors'): the whole user message, instruction included. ZJU-REAL/Cooper reads
    `raw_prompt[0]["content"]` both for the assistant (recipe/cooper/collaborate.py `_generate_negative_response`)
    and for the RM's `<question>` (recipe/cooper/fsdp_workers.py `_switch_chat_template`).

Negative text:
  * "text" (coreward's): the assistant's text as written;
  * "chat" (the authors'): collaborate.py renders the text as the assistant's turn of the policy's chat template
    (the full chat minus the generation prompt), tokenizes it with the policy's tokenizer cut to the response
    length (`max_response_length`, 512), and fsdp_workers.py decodes those tokens and removes the eos token.
    With Qwen's template the result is the text followed by "\\n" (the newline after `<|im_end|>`), so the RM
    reads `...\\n</completion>` for a negative, where a positive (a rollout decoded up to its eos) has no newline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from coreward.data.prompts import render_prompt
from coreward.runtime.errors import CorewardError


@dataclass
class RMInputSettings:
    """Where the RM a reward scores with runs and what it reads: the static RM's (`model`) and Cooper's params of
    these names, declared once (their Params extend this class)."""

    device: str = "auto"  # "auto": the policy's device; or "cpu", "cuda:1", ...
    rm_cut: Literal["coreward", "cooper"] = "coreward"  # RM input cutting: every field + tokens from the left (ours), or the Cooper authors' (rm/model.py)
    question_field: Literal["question", "prompt"] = "question"  # the RM's question (and Cooper's assistant's): the bare question (ours), or the whole user message, instruction included (the Cooper authors')
    max_tokens_per_pass: int | None = None  # at most this many padded tokens (rows × longest row) per RM forward pass (verl's ppo_max_token_len_per_gpu); None: batch_size alone caps a pass (sequences sorted by length either way)
    param_offload: bool = False  # the RM's weights on the CPU between uses, moved to its device to score and update (the Cooper authors': fsdp_config.param_offload)

    def rm_options(self) -> dict[str, Any]:
        """These settings as VerifyRM's keyword arguments (rm/model.py)."""
        return {"max_tokens_per_pass": self.max_tokens_per_pass, "param_offload": self.param_offload}

    def validate_rm_inputs(self) -> None:
        """A ValueError names the field first."""
        if self.max_tokens_per_pass is not None and self.max_tokens_per_pass < 1:
            raise ValueError(f"max_tokens_per_pass must be >= 1 (or null: no token budget), got {self.max_tokens_per_pass}")

    def questions(self, batch: Any, source: str) -> list[str]:
        """The question of every row of `batch` (a RolloutBatch) as `question_field` says: the dataset's question
        column (an error names `source` when it is missing), or the whole user message of the row's prompt."""
        if self.question_field == "prompt":
            return [user_message(prompt) for prompt in batch.prompts]
        return [str(q) for q in batch.require_columns(source, "question")[0]]


def user_message(prompt: Any) -> str:
    """The last user message of a chat prompt (a list of messages), or a plain prompt itself."""
    if isinstance(prompt, str):
        return prompt
    users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise CorewardError(f"a chat prompt without a user message: {prompt!r:.200}")
    return str(users[-1]["content"])


def as_chat_reply(tokenizer: Any, prompt: Any, text: str, max_tokens: int) -> str:
    """`text` as the authors hand a negative to the RM: the policy's chat-template rendering of it as the
    assistant's reply to `prompt`, cut to `max_tokens` of the policy's tokens, with the eos token removed."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    head = render_prompt(tokenizer, messages, add_generation_prompt=True)
    whole = render_prompt(tokenizer, [*messages, {"role": "assistant", "content": text}], add_generation_prompt=False)
    if not whole.startswith(head):  # their collaborate.py asserts the same
        raise CorewardError("the policy's chat template does not render a reply after the prompt it renders alone")
    ids = tokenizer(whole[len(head):], add_special_tokens=False)["input_ids"][:max_tokens]
    reply = tokenizer.decode(ids)
    return reply.replace(tokenizer.eos_token, "") if tokenizer.eos_token else reply
