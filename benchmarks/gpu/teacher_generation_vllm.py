"""Co-rewarding-II's teacher rollouts through the policy's vLLM engine vs transformers' `generate`.

    python -m benchmarks.gpu.teacher_generation_vllm [--steps 6] [--set key=value ...]

Two runs of configs/demo/co_rewarding_2.yaml (16 prompts x 8 teacher rollouts per step, 32 tokens),
one with `grpo.use_vllm=true` (the teacher's weights are loaded into the policy's colocated engine, which
samples, then TRL pushes the policy back), one without (the teacher samples with `generate`). Printed per
run, medians over the steps after the first (warm-up): the teacher's sampling time
(`time/teacher_generation`, which includes loading its weights into vLLM), teacher rollouts per second,
the policy's own generation time and the whole step. Run it in an environment with vLLM (CI's second
stage builds one: .ci/run). Without a GPU, vLLM's CPU build runs through tests/helpers/vllm_cpu.py, which
turns off its weight repacking (else weights can't be pushed); vLLM then runs the float32 demo policy in
bfloat16 (its "auto"), transformers in float32.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "demo" / "co_rewarding_2.yaml"
ROLLOUTS_PER_STEP = 16 * 8  # prompts per step x teacher rollouts per prompt, in the demo config


def run(use_vllm: bool, steps: int, overrides: list[str], out: Path) -> list[dict]:
    import torch

    cli = [str(ROOT / "tests" / "helpers" / "vllm_cpu.py")] if use_vllm and not torch.cuda.is_available() else [
        "-m", "coreward.cli"]
    args = ["train", "--config", str(CONFIG), "--output-dir", str(out), "--max-steps", str(steps),
            "--set", f"grpo.use_vllm={str(use_vllm).lower()}", "--set", "data.eval=null"]
    for override in overrides:
        args += ["--set", override]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    subprocess.run([sys.executable, *cli, *args], check=True, env=env, cwd=ROOT, capture_output=True)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "time/teacher_generation" in row][1:]  # the first step warms up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    options = parser.parse_args()
    print(f"{'teacher via':<10} {'teacher s/step':>15} {'rollouts/s':>11} {'policy gen s':>13} {'step s':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for use_vllm in (True, False):
            rows = run(use_vllm, options.steps, options.overrides, Path(tmp) / str(use_vllm))
            teacher = statistics.median(row["time/teacher_generation"] for row in rows)
            policy = statistics.median(row["time/generation"] for row in rows)
            step = statistics.median(row["step_time"] for row in rows)
            name = "vllm" if use_vllm else "generate"
            print(f"{name:<10} {teacher:>15.3f} {ROLLOUTS_PER_STEP / teacher:>11.0f} {policy:>13.3f} {step:>8.2f}")


if __name__ == "__main__":
    main()
