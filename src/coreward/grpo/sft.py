"""Supervised fine-tuning through TRL's `SFTTrainer` (the engine package is the one place TRL is used).

`run_sft` takes a model, its tokenizer, prompt-completion rows and `SFTConfig` settings, trains, and returns
the trainer's state; the caller (the demo's warm start) builds the model and saves it.
"""

from __future__ import annotations

from typing import Any


def sft_config(**settings: Any):
    """TRL's `SFTConfig`, built from keyword settings (either name of the checkpointing switch)."""
    from trl import SFTConfig

    from coreward.grpo.compat import checkpointing_settings

    return SFTConfig(**checkpointing_settings(settings))


def run_sft(model, tokenizer, dataset, args, callbacks: list | None = None, quiet: bool = True):
    """Train `model` on `dataset` with `SFTTrainer`; `quiet` drops HF's raw log-dict printer (the caller
    prints its own progress)."""
    from transformers import PrinterCallback
    from trl import SFTTrainer

    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         callbacks=callbacks or [])
    if quiet:
        trainer.remove_callback(PrinterCallback)
    trainer.train()
    return trainer.state
