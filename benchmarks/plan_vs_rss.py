"""The CPU memory plan (`coreward plan --device cpu`) against the peak resident memory `coreward train` measures.

Builds tests/grpo/test_plan.py's policy (a random 2-layer Qwen2 at hidden 512 with Qwen2.5's 151,936-token
vocabulary: 82M parameters), plans the run, runs `coreward train` for 2 steps in a child process and prints the
plan's phases beside the child's ru_maxrss (what `/usr/bin/time -v` reports as "Maximum resident set size"), then
the same for the process's baseline (`coreward train` of the 0.8M-parameter demo policy).

    python benchmarks/plan_vs_rss.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.grpo.test_plan import MEASURE, build_wide_policy  # noqa: E402
from tests.helpers.runs import RULE_CONFIG  # noqa: E402


def measure(sets: list[str], run_dir: Path) -> tuple[dict, int]:
    args = [arg for item in sets for arg in ("--set", item)]
    plan = subprocess.run([sys.executable, "-m", "coreward.cli", "plan", "--config", str(RULE_CONFIG),
                           "--device", "cpu", "--json", *args], capture_output=True, text=True)
    if plan.returncode not in (0, 3):  # 3: over this machine's RAM, still a plan to hold against the measured peak
        raise RuntimeError(f"coreward plan exited {plan.returncode}: {plan.stderr.strip()}")
    planned = json.loads(plan.stdout)
    done = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "coreward.cli", "train", "--config",
                           str(RULE_CONFIG), "--max-steps", "2", "--output-dir", str(run_dir), *args],
                          capture_output=True, text=True, check=True)
    return planned, int(done.stdout.split("maxrss_kib")[-1].split()[0]) * 1024


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    mib = 1024**2
    with tempfile.TemporaryDirectory() as tmp:
        policy = build_wide_policy(Path(tmp) / "policy")
        common = ["grpo.num_generations=4", "grpo.per_device_train_batch_size=4", "grpo.max_completion_length=8",
                  "data.max_prompt_tokens=24", "grpo.save_steps=100", "data.eval_every=0", "kl_from_init_estimator=k3",
                  "torch_threads=1"]
        for label, sets in (("wide Qwen2 (82M)", [f"model.name_or_path={policy}", *common]),
                            ("demo policy (0.8M)", common)):
            planned, measured = measure(sets, Path(tmp) / label.split()[0])
            print(f"{label}: planned peak {planned['peak_bytes'] / mib:,.0f} MiB ({planned['peak_phase']}), measured "
                  f"ru_maxrss {measured / mib:,.0f} MiB, planned/measured {planned['peak_bytes'] / measured:.3f}")
            for phase, value in planned["phases"].items():
                print(f"    {phase:<15} {value / mib:8,.0f} MiB")


if __name__ == "__main__":
    main()
