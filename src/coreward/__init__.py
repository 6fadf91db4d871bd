"""coreward: RL for LLM reasoning with co-optimized and co-derived rewards."""

__version__ = "0.1.0"
