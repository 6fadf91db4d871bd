"""Speed harnesses: step, evaluation, RM and reward-phase times, start-up, the demo's wall time."""
