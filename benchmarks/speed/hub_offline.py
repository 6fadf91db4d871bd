"""How long a hub dataset id takes to fail without a network: the connectivity probe, and HF_HUB_OFFLINE.

    python -m benchmarks.speed.hub_offline [DATASET_ID]
"""

from __future__ import annotations

import argparse
import time

from huggingface_hub import constants

from coreward.data.sources import load_named
from coreward.runtime.errors import CorewardError


def failure_time(source: str) -> tuple[float, str]:
    start = time.monotonic()
    try:
        load_named(source, "train", None, None, key="data.train")
    except CorewardError as err:
        return time.monotonic() - start, str(err)
    return time.monotonic() - start, "loaded (the hub is reachable here)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", nargs="?", default="openai/gsm8k:main", help="a hub dataset id[:subset]")
    source = parser.parse_args().dataset
    seconds, message = failure_time(source)
    print(f"no offline mode: {seconds:.2f} s: {message}")
    constants.HF_HUB_OFFLINE = True
    seconds, message = failure_time(source)
    print(f"HF_HUB_OFFLINE=1: {seconds:.2f} s: {message}")


if __name__ == "__main__":
    main()
