"""The sampling copy's decoding (SmolLM2-135M-Instruct in bf16, 32 rows of 64 new tokens): dynamic KV cache, static KV
cache, static KV cache with torch.compile on the forward. Four timed calls each, in this order, in one process:

    python studies/2026-12-05-sampling-static-cache-compile/probe.py [dynamic] [static] [static_compile]
"""

import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from coreward.runtime.assets import resolve_model


torch.set_num_threads(2)
path = resolve_model("smollm2-135m-instruct")
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
texts = [tok.apply_chat_template([{"role": "user", "content": f"What is {13 + i} + {27 * i}? Put the answer in "
                                   "\\boxed{}."}], tokenize=False, add_generation_prompt=True) for i in range(4)]
tok.padding_side = "left"
enc = tok([t for t in texts for _ in range(8)], return_tensors="pt", padding=True)


def run(**kw) -> float:
    started = time.perf_counter()
    with torch.no_grad():
        model.generate(**enc, do_sample=True, temperature=0.7, max_new_tokens=64, min_new_tokens=64,
                       pad_token_id=tok.pad_token_id, **kw)
    return time.perf_counter() - started


for mode in sys.argv[1:] or ["dynamic", "static", "static_compile"]:
    kw = {"cache_implementation": "static"} if mode.startswith("static") else {}
    if mode == "static_compile":
        model.forward = torch.compile(model.forward, dynamic=False)
    times = [run(**kw) for _ in range(4)]
    print(mode, "times", [round(x, 2) for x in times], flush=True)
