"""Prompt templates: the instruction both papers append to every question, and chat rendering."""

from __future__ import annotations

from typing import Any

from coreward.runtime.errors import CorewardError


INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."

# The chat template of a model that reads bare text (the demo's character-level policy): messages are only
# concatenated, no role markers. Evaluation recognises such a model by it and prompts it plainly.
PLAIN_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ message['content'] }}"
    "{%- if message['role'] == 'assistant' -%}{{ eos_token }}{%- endif -%}"
    "{%- endfor -%}"
)


def build_messages(question: str, instruction: str | None = INSTRUCTION, system: str | None = None) -> list[dict]:
    """Chat messages for one question: user content is `question + " " + instruction`, as Cooper and
    Co-rewarding build their training prompts (the \\boxed{} request is what makes answers extractable)."""
    content = f"{question} {instruction}" if instruction else question
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": content})
    return messages


def render_prompt(tokenizer: Any, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """The prompt text a chat model expects, through the tokenizer's own chat template."""
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        raise CorewardError(
            f"tokenizer {name!r} has no chat template; use plain_prompt() for models without one"
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def plain_prompt(question: str, instruction: str | None = None) -> str:
    """Prompt for models without a chat template (base models, the demo's character-level model).

    No "Question:/Answer:" scaffolding is added: the demo model's vocabulary has no letters for it,
    and a base model given an instruction gets it appended exactly as in the chat user message.
    """
    question = question.strip()
    return f"{question} {instruction}" if instruction else question
