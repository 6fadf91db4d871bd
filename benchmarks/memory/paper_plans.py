"""The memory plan of every paper config on the hardware its comments declare, as a markdown table (docs/figures.md,
"the paper configs' planned peaks"; `coreward plan --config F --json` for each file under configs/paper/), with how
much of each peak is in terms no GPU has checked yet (the plan's `unmeasured_on_gpu`).

    python -m benchmarks.memory.paper_plans
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print("| config | GPUs | engine | planned peak per GPU | peak phase | spare | of the peak, unmeasured on a GPU |")
    print("|---|---|---|---|---|---|---|")
    for config in sorted((REPO / "configs" / "paper").glob("*.yaml")):
        done = subprocess.run([sys.executable, "-m", "coreward.cli", "plan", "--config", str(config), "--json"],
                              capture_output=True, text=True)
        if done.returncode not in (0, 3):  # 3: the plan does not fit (printed all the same: its row says by how much)
            sys.exit(f"{config.name}: coreward plan exited {done.returncode}: {done.stderr.strip()}")
        plan = json.loads(done.stdout)
        hardware = plan["hardware"]
        # what the "fits" rests on that no GPU has checked yet: the peak phase's unmeasured items
        unmeasured = [i for i in plan["items"] if i["name"] in plan["unmeasured_on_gpu"] and plan["peak_phase"] in i["phases"]]
        print(f"| `{config.name}` | {hardware['gpus']} x {hardware['device_bytes'] / 1024**3:.0f} GiB | "
              f"{hardware['engine']} | {plan['peak_bytes'] / 1024**3:.1f} GiB | {plan['peak_phase']} | "
              f"{plan['spare']:.0%} | {sum(i['bytes'] for i in unmeasured) / 1024**3:.1f} GiB: "
              f"{', '.join(i['name'] for i in sorted(unmeasured, key=lambda i: -i['bytes']))} |")


if __name__ == "__main__":
    main()
