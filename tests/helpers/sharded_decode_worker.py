"""Sampling from an FSDP2-sharded model under torchrun (2 gloo processes), each rank's rows ending at another step.

    torchrun --nproc_per_node 2 tests/helpers/sharded_decode_worker.py MODEL_DIR OUT_DIR

Every forward of a sharded model gathers each layer's weights from all ranks, so a rank whose rows have all ended
must keep stepping until the other's have (`generate`'s `synced_gpus`); a loop that stopped at its own rows would
leave the other rank waiting in its next gather. Rank 0's rows end at their first token (every token ends them),
rank 1's run to the budget (their end token held back until it). Each rank writes its rows' lengths to OUT_DIR/rank{R}.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from coreward.runtime.distributed import exit_now, leave_process_group
from coreward.runtime.generation import generate_from_ids


BUDGET = 12


def main(model_dir: str, out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    ends = list(range(len(tokenizer))) if rank == 0 else [tokenizer.eos_token_id]
    prompts = [tokenizer("What is 2 + 3?")["input_ids"], tokenizer("Tom has 4 apples.")["input_ids"]]
    for sample in (False, True):
        config = GenerationConfig(do_sample=sample, temperature=1.0, top_k=0, max_new_tokens=BUDGET,
                                  min_new_tokens=0 if rank == 0 else BUDGET,  # rank 1's end token never scores
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=ends)
        rows = generate_from_ids(model, prompts, tokenizer.pad_token_id, repeat=2, generation_config=config)
        cut = [next((k + 1 for k, t in enumerate(row) if t in ends), len(row)) for row in rows]
        Path(out_dir, f"rank{rank}-{'sampled' if sample else 'greedy'}.json").write_text(json.dumps(cut))
    leave_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
    # the interpreter's teardown of gloo's threads aborts a finished rank now and then (exit -6): end as `coreward
    # train` does, every file written; an exception in main still exits 1 through the interpreter
    exit_now(0)
