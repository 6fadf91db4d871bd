"""Deterministic kill points for the crash-and-resume tests: `COREWARD_FAULT_AT=PHASE:STEP`.

With the variable set, the training process sends itself SIGKILL when it reaches PHASE of optimizer step
STEP: no handler, no `finally`, no flush runs, as when the machine dies or the OOM killer strikes. The
test then runs `coreward train --resume` and checks that nothing was lost or counted twice. Unset (the
normal case) each point costs one dictionary lookup.

    phase                 where the process dies (step = the optimizer step in progress, counted from 1)
    generation            step's rollouts are sampled; no reward computed yet
    reward                every reward source has scored step's rollouts (Cooper's RM already updated in memory)
    update                step's gradients are computed; the optimizer has not stepped
    checkpoint            checkpoint-STEP is half written: model weights on disk, optimizer, RNG states,
                          trainer state, reward-source state and completeness marker not
    checkpoint-sources    checkpoint-STEP has everything of TRL's, the reward sources' state is not written
    rotation              checkpoint-STEP is complete; older checkpoints are not yet rotated away (main process)

Several points may be listed, comma-separated: the process dies at the first one it reaches. In a
multi-process run every process dies there, unless `COREWARD_FAULT_RANK=R` picks one (the global rank, as
torchrun sets `RANK`): then torchrun sees one worker die and stops the others, as when one node is lost.
"""

from __future__ import annotations

import os
import signal
import sys

from coreward.runtime.errors import CorewardError


FAULT_ENV = "COREWARD_FAULT_AT"
FAULT_RANK_ENV = "COREWARD_FAULT_RANK"
PHASES = ("generation", "reward", "update", "checkpoint", "checkpoint-sources", "rotation")
MAIN_PROCESS_PHASES = {"rotation"}  # reached by the main process alone: a kill there is aimed at rank 0


def parse_faults(spec: str | None) -> set[tuple[str, int]]:
    """`"reward:3,checkpoint:4"` -> {("reward", 3), ("checkpoint", 4)}; a malformed spec names itself."""
    points = set()
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        phase, _, step = item.rpartition(":")
        if phase not in PHASES or not step.isdigit():
            raise CorewardError(
                f"{FAULT_ENV}={spec!r}: each point must be PHASE:STEP with PHASE one of {', '.join(PHASES)}"
            )
        points.add((phase, int(step)))
    return points


def fault_point(phase: str, step: int) -> None:
    """Die here (SIGKILL) when `COREWARD_FAULT_AT` names this phase and step."""
    spec = os.environ.get(FAULT_ENV)
    only_rank = os.environ.get(FAULT_RANK_ENV)
    if only_rank is not None and only_rank != os.environ.get("RANK", "0"):
        return
    if spec and (phase, step) in parse_faults(spec):
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
