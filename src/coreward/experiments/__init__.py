"""Experiments over many training runs (the hackability map): they drive `coreward train`, so they sit above grpo."""
