"""The demo RM's held-out (correct, wrong) pairs: Cooper's `eval_data: demo`.

Each of the first 200 demo test problems gives its worked solution (label 1) and a perturbation of it
(label 0: the assistant's near miss, `rewards.cooper.assistant.perturb`). The rows are shipped as the asset file
`assets/demo_rm_heldout_pairs.jsonl` (so Cooper reads a file like any user's), written by
`python -m coreward.demo.rows`; a test checks the shipped file equals what this code makes.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from coreward.data.synthetic import VERIFIABLE_FORMATS, demo_problems
from coreward.rewards.cooper.assistant import perturb
from coreward.runtime.assets import shipped_path


EVAL_PROBLEMS = 200  # demo test problems in the held-out set: 200 (correct, wrong) pairs


def demo_eval_rows(problems: int = EVAL_PROBLEMS) -> list[dict]:
    """(correct, wrong) pairs on demo test problems: the worked solution, and its perturbation."""
    rows = []
    for i, problem in enumerate(demo_problems("test")[:problems]):
        correct = problem.solution(VERIFIABLE_FORMATS[i % len(VERIFIABLE_FORMATS)])
        wrong = perturb(correct, str(problem.answer), random.Random(i))
        for completion, label in ((correct, 1), (wrong, 0)):
            rows.append({"question": problem.question(), "reference_answer": str(problem.answer),
                         "completion": completion, "label": label})
    return rows


def write_rows(path: Path) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in demo_eval_rows()))
    return path


if __name__ == "__main__":
    print(write_rows(Path(sys.argv[1]) if len(sys.argv) > 1 else shipped_path("demo", "rm_pairs")))
