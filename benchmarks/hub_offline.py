"""How long a hub dataset id takes to fail without a network: the connectivity probe, and HF_HUB_OFFLINE.

    python benchmarks/hub_offline.py [DATASET_ID]
"""

from __future__ import annotations

import sys
import time

from huggingface_hub import constants

from coreward.data.benchmarks import load_named
from coreward.runtime.errors import CorewardError


def failure_time(source: str) -> tuple[float, str]:
    start = time.monotonic()
    try:
        load_named(source, "train", None, None, key="data.train")
    except CorewardError as err:
        return time.monotonic() - start, str(err)
    return time.monotonic() - start, "loaded (the hub is reachable here)"


def main() -> None:
    source = sys.argv[1] if len(sys.argv) > 1 else "openai/gsm8k:main"
    seconds, message = failure_time(source)
    print(f"no offline mode: {seconds:.2f} s: {message}")
    constants.HF_HUB_OFFLINE = True
    seconds, message = failure_time(source)
    print(f"HF_HUB_OFFLINE=1: {seconds:.2f} s: {message}")


if __name__ == "__main__":
    main()
