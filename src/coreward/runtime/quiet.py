"""Library noise a command-line run does not print: a run shows its progress bar, its figures, and the
warnings that call for action (ours), not the libraries' internal chatter.

Silenced, each for a reason:
* transformers' and huggingface_hub's progress bars ("Loading weights", "Writing model shards"): a tiny
  model loads in milliseconds, and every checkpoint would print two more bars under the training bar;
* transformers' warnings below ERROR: on every resume it reports the tied `lm_head.weight` as a missing key
  (tied weights are not stored) and that `save_steps` from the checkpoint differs from the arguments (the
  arguments win, as intended); `COREWARD_VERBOSE=1` brings them back;
* the `is_gradient_checkpointing` FutureWarning raised inside TRL (not our call);
* DeepSpeed's "Setting accelerator to CPU" on machines without a GPU (it probes on import).
"""

from __future__ import annotations

import os
import shutil
import warnings


def quiet_libraries(command_line: bool = True) -> None:
    """`command_line=False` (the Python API, in a user's own process): only the two messages that are ours to
    spare a user (DeepSpeed's accelerator probe, TRL's FutureWarning), not the libraries' logging or progress bars,
    which the user's program may want."""
    if os.environ.get("COREWARD_VERBOSE"):
        return
    if shutil.which("nvidia-smi") is None:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no GPU to find: DeepSpeed need not say so
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
    if not command_line:
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
