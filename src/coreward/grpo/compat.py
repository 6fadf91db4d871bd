"""Names that differ across the transformers versions coreward supports (see pyproject's bounds).

transformers 5.23 renamed `TrainingArguments.gradient_checkpointing` to `activation_checkpointing` (and
ignores the old name); 5.17, the newest that vLLM 0.31 allows, knows only the old one. Every config we
build goes through `checkpointing_settings`, so the installed version gets the name it knows.
"""

from __future__ import annotations

from typing import Any


NAMES = ("activation_checkpointing", "gradient_checkpointing")  # newest first


def checkpointing_key() -> str:
    """The installed transformers' name for the activation (gradient) checkpointing switch."""
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    return next(name for name in NAMES if name in fields)


def checkpointing_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with either spelling of the switch renamed to the installed one (the last given wins)."""
    key = checkpointing_key()
    out = {k: v for k, v in settings.items() if k not in NAMES}
    for k, v in settings.items():
        if k in NAMES:
            out[key] = v
    return out
