"""What an evaluation stopped part-way keeps: the completions of its finished batches, in OUTPUT/partial/.

Each finished generation batch is written to its own file (written whole, then renamed) beside `settings.json`,
the evaluation's fingerprint: the model, every recorded setting and the prompts. The same command again (same
fingerprint) reads them back and samples only the batches missing; the backends seed each batch (HF) or prompt
(vLLM) from its place in the whole evaluation, so the results are those of an evaluation never stopped. Scoring
is not kept: it is run again over every completion (the rule verifier takes seconds where sampling takes minutes).
Once results.json is written the directory is removed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from coreward.evaluation.backends import Generation
from coreward.runtime.files import keep_piece, kept_for


PARTIAL_DIR = "partial"
BATCH_FILES = "batch-*.jsonl"  # one per finished generation batch, a line per problem


def fingerprint(model: str, settings: dict[str, Any], prompts: list[str]) -> dict[str, Any]:
    """What must be equal for kept completions to belong to this evaluation."""
    digest = hashlib.sha256("\x00".join(prompts).encode()).hexdigest()
    return {"model": model, "weights": _weights_stamp(model), "settings": settings, "prompts_sha256": digest,
            "prompts": len(prompts)}


def _weights_stamp(model: str) -> list[list[Any]]:
    """Size and modification time of a model directory's weight files (a model retrained in place is another)."""
    path = Path(model)
    if not path.is_dir():
        return []
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(path.glob("*.safetensors"))
            + sorted(path.glob("*.bin"))]


def kept_problems(output_dir: str | Path) -> int:
    """How many problems an evaluation writing into `output_dir` has finished so far (its kept batches' lines: one
    problem each), for a progress line read from outside the evaluating process."""
    try:
        return sum(path.read_text().count("\n") for path in (Path(output_dir) / PARTIAL_DIR).glob(BATCH_FILES))
    except OSError:  # a batch renamed or the directory removed as it is read: the next reading counts it
        return 0


class KeptGenerations:
    """The finished batches of this evaluation in `output_dir/partial/` (read back when the fingerprint matches)."""

    def __init__(self, output_dir: str | Path, identity: dict[str, Any], total: int):
        self.directory = Path(output_dir) / PARTIAL_DIR
        self.identity = json.loads(json.dumps(identity, default=str))  # as settings.json holds it
        self.total = total  # prompts in the evaluation
        self.generations: dict[int, list[Generation]] = {}
        self._files = 0
        self._read()

    def _read(self) -> None:
        if not kept_for(self.directory, self.identity, f"eval: {self.directory} holds completions of an evaluation "
                        "with other settings, model or data: they are discarded"):
            return
        for path in sorted(self.directory.glob(BATCH_FILES)):
            for line in path.read_text().splitlines():
                row = json.loads(line)
                self.generations[row["prompt"]] = [Generation(*g) for g in row["generations"]]
            self._files += 1
        if self.generations:
            print(f"eval: continuing a stopped evaluation: {len(self.generations):,} of {self.total:,} problems' "
                  f"completions are kept in {self.directory}; sampling the rest", file=sys.stderr)

    def add(self, prompts: list[int], generations: list[list[Generation]]) -> None:
        """Keep one finished batch (its file appears whole or not at all)."""
        lines = [json.dumps({"prompt": i, "generations": [[g.text, g.num_tokens, g.truncated] for g in group]})
                 for i, group in zip(prompts, generations)]
        keep_piece(self.directory, self.identity, f"batch-{self._files:05d}.jsonl", "\n".join(lines) + "\n")
        self._files += 1
        self.generations.update(zip(prompts, generations))

    def stopped_line(self) -> str:
        """What a Ctrl-C leaves, and how to go on."""
        if not self.generations:
            return "no batch had finished: nothing is kept; run the same command again to start it"
        return (f"the completions of {len(self.generations):,} of {self.total:,} problems are kept in "
                f"{self.directory}; run the same command again to go on from them")

    def remove(self) -> None:
        """The evaluation's results are written: what it kept is no longer needed."""
        shutil.rmtree(self.directory, ignore_errors=True)
