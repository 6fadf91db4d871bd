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


def quiet_libraries() -> None:
    if os.environ.get("COREWARD_VERBOSE"):
        return
    if shutil.which("nvidia-smi") is None:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no GPU to find: DeepSpeed need not say so
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
