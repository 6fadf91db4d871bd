"""Policy training: the GRPO trainer and its samplers, SFT warm start, the demo model and tokenizer."""
