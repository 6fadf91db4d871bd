"""A Cooper run on the demo task whose assistant endpoint stops answering mid-run, and the health summary it ends with.

    python benchmarks/stopped_endpoint.py [--max-steps 10] [--stop-after 3] [--output-dir runs/stopped_endpoint]

The assistant is a local OpenAI-compatible server (tests/helpers/llm_test_server.py) given to Cooper as a URL, the
way a user names a vLLM server (`assistant: http://127.0.0.1:PORT/v1#test-model`, the endpoint client's default
retries and deadline). It answers every request with a wrong solution (`#### 99999`) until `--stop-after` steps are
done, then it is shut down: its port refuses connections, every request fails after its retries, and no pair is
valid. The run goes on (mid-run faults are retried, dropped and counted), warns once that for 5 steps in a row its RM
has not learned and why, and prints its health summary (also in RUN/health.json), which this script prints again.
The demo config (configs/demo/cooper.yaml), the shipped demo policy and RM.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from transformers import TrainerCallback


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test server is test machinery (tests/helpers)

REPO = Path(__file__).resolve().parents[1]
WRONG_SOLUTION = "1+1=2;2-1=1;#### 99999"


class StopServerAfter(TrainerCallback):
    def __init__(self, server, step: int):
        self.server, self.step = server, step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step and not self.server.stopping.is_set():
            print(f"[stopped_endpoint] step {self.step} done: the assistant's server stops now", flush=True)
            self.server.__exit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--stop-after", type=int, default=3)
    parser.add_argument("--output-dir", default="runs/stopped_endpoint")
    args = parser.parse_args()

    import coreward  # noqa: F401 - registers the demo assets' builders
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from tests.helpers.llm_test_server import LLMTestServer

    start = time.perf_counter()
    with LLMTestServer(reply=lambda prompt: WRONG_SOLUTION) as server:
        config = load_config(TrainConfig, REPO / "configs" / "demo" / "cooper.yaml",
                             [f"rewards.0.params.assistant={server.url}#test-model"])
        run_training(config, output_dir=args.output_dir, max_steps=args.max_steps,
                     extra_callbacks=[StopServerAfter(server, args.stop_after)])
    health = json.loads((Path(args.output_dir) / "health.json").read_text())
    print(f"\n[stopped_endpoint] {args.max_steps} steps in {time.perf_counter() - start:.0f} s; health.json:")
    for line in health["warnings"] + [f"health: {line}" for line in health["lines"]]:
        print(line)


if __name__ == "__main__":
    main()
