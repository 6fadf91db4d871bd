"""The memory plan held against runs other trainers' users and maintainers published: each run's source, settings
and outcome, the coreward run it maps to (the mapping stated), and the plan's verdict beside the outcome.

    python -m benchmarks.memory.peer_runs [--markdown]

A case is comparable when coreward runs the same work as the published run: the same model states under the same
engine, and an update whose activations and log-probability head are what coreward's (TRL 1.16's fused head, padded
micro-batches) would hold. Where the published run does other work (offloads the policy, packs sequences without
padding, materialises the whole vocabulary's logits), its row says which, and its verdict is shown but not counted.
The models' shapes are their published config.json (written here: nothing is fetched); each plan is made in this
process from those shapes alone. The benchmark exits 1 when a comparable case disagrees.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]

# the published config.json fields the plan reads, for the models coreward does not ship
SHAPES = {
    "Meta-Llama-3-8B-Instruct": {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
                                 "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                                 "num_key_value_heads": 8, "max_position_embeddings": 8192,
                                 "tie_word_embeddings": False},
    "Qwen2.5-7B-Instruct": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
                            "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                            "num_key_value_heads": 4, "max_position_embeddings": 32768, "tie_word_embeddings": False},
    "DeepSeek-R1-Distill-Qwen-1.5B": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536,
                                      "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
                                      "num_key_value_heads": 2, "max_position_embeddings": 131072,
                                      "tie_word_embeddings": False},
    "Qwen3-0.6B": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
                   "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 40960, "tie_word_embeddings": True, "attention_bias": False},
    "Qwen3-1.7B": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
                   "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                   "max_position_embeddings": 40960, "tie_word_embeddings": True, "attention_bias": False},
}
SHIPPED = {"Qwen2.5-1.5B-Instruct": "Qwen/Qwen2.5-1.5B-Instruct", "Qwen3-4B": "Qwen/Qwen3-4B-Base"}  # same shapes


@dataclass
class Case:
    name: str
    source: str  # URL
    settings: str  # as published
    outcome: str  # as published
    ran: bool  # the published run fitted (trained) or ran out of memory
    model: str
    gpus: int
    gpu_gib: int
    engine: str
    sets: list[str]
    mapping: str  # what the coreward run is, where it differs
    comparable: str = ""  # empty: coreward runs the same work; else why not
    verdict: dict = field(default_factory=dict)


def grpo(rows: int, generations: int, prompt: int, completion: int, checkpointing: bool, *extra: str) -> list[str]:
    return [f"grpo.per_device_train_batch_size={rows}", f"grpo.num_generations={generations}",
            f"data.max_prompt_tokens={prompt}", f"grpo.max_completion_length={completion}",
            f"grpo.gradient_checkpointing={str(checkpointing).lower()}", *extra]


BF16_WEIGHTS = ["model.dtype=bfloat16", "model.master_weights=none"]  # torch_dtype bfloat16: the weights are bf16
NO_COPIES = ["grpo.beta=0.0", "kl_from_init=false"]
COLOCATED = ["grpo.use_vllm=true", "grpo.vllm_mode=colocate"]
VLLM_SERVER = ["grpo.use_vllm=true", "grpo.vllm_mode=server"]

VERL_7B_LORA = ("https://github.com/volcengine/verl/blob/b178a3cd56f58b2d502255daba591e92833930a7/examples/tuning/7b/"
                "qwen2-7b_grpo-lora_1_h100_fsdp_vllm.sh")
TRL_3456 = "https://github.com/huggingface/trl/issues/3456"
OPEN_R1 = "https://github.com/huggingface/open-r1/blob/1416fa0cf21595d2083b399a2a0bbddd7f6e9563/"
LORA_7B = ["lora.enabled=true", "lora.r=32", "lora.alpha=32", "lora.dropout=0", "lora.target_modules=all-linear",
           *BF16_WEIGHTS, "grpo.vllm_gpu_memory_utilization=0.2", "grpo.vllm_enable_sleep_mode=true", *COLOCATED,
           "grpo.beta=0.001", "kl_from_init=false"]
TRL_0_17_HEAD = ("TRL 0.17-0.18 (the issue's) materialises the whole vocabulary's logits (batch x completion x "
                 "151,936, float32), where TRL 1.16's fused head, coreward's, tiles them; and the issue does not say "
                 "the weights' dtype (float32 planned, TRL's default load) nor the real prompts' length (up to 2,500 "
                 "characters, padded to the batch's longest)")

CASES = [
    Case("LlamaFactory: Llama-3-8B full SFT, ZeRO-3, 8 x RTX 3090",
         "https://github.com/hiyouga/LlamaFactory/issues/5977",
         "Meta-Llama-3-8B-Instruct, full fine-tune, ds_z3_config.json, 8 x 24 GB, batch 1 x cutoff_len 1,024, fp16, "
         "gradient checkpointing (LlamaFactory's default)", "out of memory", False,
         "Meta-Llama-3-8B-Instruct", 8, 24, "zero3", grpo(1, 8, 512, 512, True, *NO_COPIES),
         "the GRPO update of one 1,024-token sequence per GPU (512 + 512), no KL copies; generation by transformers "
         "(one sequence's cache, below the update)"),
    Case("LlamaFactory: the same with ZeRO-3 offload",
         "https://github.com/hiyouga/LlamaFactory/issues/5977",
         "as above with ds_z3_offload_config.json", "runs, 13 GB per GPU (the maintainer: normal)", True,
         "Meta-Llama-3-8B-Instruct", 8, 24, "zero3", grpo(1, 8, 512, 512, True, *NO_COPIES), "as above",
         "coreward offloads no policy state (parameters, optimizer) to the CPU"),
    Case("OpenRLHF: Qwen2.5-7B GRPO, ZeRO-2 actor on 2 x RTX 6000 Ada",
         "https://github.com/OpenRLHF/OpenRLHF/issues/901",
         "Qwen2.5-7B-Instruct, --zero_stage 2, actor on 2 x 48 GB (reference on 2 more), --bf16, "
         "--micro_train_batch_size 2, --prompt_max_len 1024, --n_samples_per_prompt 8, --flash_attn",
         "out of memory", False, "Qwen2.5-7B-Instruct", 2, 48, "zero2",
         grpo(2, 4, 1024, 64, False, *NO_COPIES, "model.attn_implementation=flash_attention_2"),
         "ZeRO-2 on 2 GPUs, micro-batch 2 of 1,024-token prompts (+64 completion tokens; its generate_max_len reads "
         "1); the reference on other GPUs in OpenRLHF: none here (beta 0)"),
    Case("TRL: Qwen3-0.6B GRPO on one A100 80 GB", TRL_3456,
         "Qwen3-0.6B, batch 4, max_prompt_length 2,048, max_completion_length 1,024, no vLLM, TRL 0.17-0.18",
         "runs, 49.3 GB used (nvidia-smi)", True, "Qwen3-0.6B", 1, 80, "one",
         grpo(4, 4, 2048, 1024, False, *NO_COPIES),
         "one process, float32 weights with bf16 autocast (TRL's default load), TRL 0.17's defaults: no "
         "checkpointing, beta 0.04 not applied (a copy: <3 GB)", TRL_0_17_HEAD),
    Case("TRL: Qwen3-1.7B GRPO on one A100 80 GB", TRL_3456, "as above, Qwen3-1.7B",
         "runs, 78.1 GB used (nvidia-smi)", True, "Qwen3-1.7B", 1, 80, "one",
         grpo(4, 4, 2048, 1024, False, *NO_COPIES), "as above", TRL_0_17_HEAD),
    Case("TRL: Qwen3-4B GRPO on one A100 80 GB", TRL_3456, "as above, Qwen3-4B", "out of memory", False,
         "Qwen3-4B", 1, 80, "one", grpo(4, 4, 2048, 1024, False, *NO_COPIES), "as above", TRL_0_17_HEAD),
    Case("TRL: Qwen3-0.6B, ZeRO-3 on 8 x A10, 20,480-token sequences",
         "https://github.com/huggingface/trl/issues/4585",
         "Qwen3-0.6B, 8 x 24 GB, ZeRO-3, vLLM colocate with sleep mode, sequence length 20,480, batch 1 per GPU, "
         "num_generations 4", "out of memory in the second backward", False, "Qwen3-0.6B", 8, 24, "zero3",
         grpo(1, 4, 4096, 16384, True, *NO_COPIES, *COLOCATED, "grpo.vllm_enable_sleep_mode=true"),
         "4,096 prompt + 16,384 completion tokens (the issue gives their sum), TRL 1.16's defaults otherwise",
         "TRL 0.25 (the issue's date) materialises one sequence's whole-vocabulary logits (20,480 x 151,936 in "
         "float32: 11.6 GiB, a maintainer's reply names it the cause); TRL 1.16's fused head does not"),
    Case("open-r1: DeepSeek-R1-Distill-Qwen-1.5B GRPO, ZeRO-3, vLLM colocated, 8 x H100",
         OPEN_R1 + "recipes/DeepSeek-R1-Distill-Qwen-1.5B/grpo/config_demo.yaml",
         "bf16 weights, flash_attention_2, per_device_train_batch_size 16, 16 generations, prompt 512 + completion "
         "2,048, gradient checkpointing, Liger's fused loss, README: `--vllm_mode colocate` on 8 x H100 80 GB",
         "the published recipe (runs)", True, "DeepSeek-R1-Distill-Qwen-1.5B", 8, 80, "zero3",
         grpo(16, 16, 512, 2048, True, *BF16_WEIGHTS, *NO_COPIES, *COLOCATED,
              "model.attn_implementation=flash_attention_2"),
         "the same settings; vLLM's share TRL's default 0.3, held through the step (no sleep mode)"),
    Case("open-r1: Qwen2.5-1.5B-Instruct code GRPO, ZeRO-2 on 7 x H100, vLLM server",
         OPEN_R1 + "recipes/Qwen2.5-1.5B-Instruct/grpo/config_demo_code.yaml",
         "bf16 weights, flash_attention_2, per_device_train_batch_size 16, 14 generations, prompt 1,024 + "
         "completion 2,048, beta 0.01, gradient checkpointing; README: `--num_processes=7` with `trl vllm-serve` "
         "on the 8th GPU", "the published recipe (runs)", True, "Qwen2.5-1.5B-Instruct", 7, 80, "zero2",
         grpo(16, 14, 1024, 2048, True, *BF16_WEIGHTS, *VLLM_SERVER, "grpo.beta=0.01", "kl_from_init=false",
              "model.attn_implementation=flash_attention_2"), "the same settings"),
    Case("open-r1: Qwen2.5-Coder-7B codeforces GRPO, ZeRO-3 on 8 x H100, vLLM server node",
         OPEN_R1 + "recipes/Qwen2.5-Coder-7B-Instruct/grpo/config_codeforces.yaml",
         "bf16 weights, flash_attention_2, per_device_train_batch_size 4, 16 generations, prompt 2,000 + "
         "completion 8,192, beta 0, gradient checkpointing; README: `--nodes=2 ... --accelerator zero3 --dp 8` "
         "(one training node of 8 x H100 80 GB, vLLM on the other)", "the published recipe (runs)", True,
         "Qwen2.5-7B-Instruct", 8, 80, "zero3",
         grpo(4, 16, 2000, 8192, True, *BF16_WEIGHTS, *NO_COPIES, *VLLM_SERVER,
              "model.attn_implementation=flash_attention_2"),
         "the same settings (Qwen2.5-Coder-7B has Qwen2.5-7B's shape)"),
    Case("verl: Qwen2.5-7B LoRA GRPO on one H100, micro-batch 100", VERL_7B_LORA,
         "LoRA r 32 all-linear, micro-batch = mini-batch = 100 sequences, prompt 512 + response 1,024, gradient "
         "checkpointing, use_remove_padding, actor param and optimizer offload, vLLM 0.2 of the GPU (freed between "
         "generations), 5 rollouts", "runs (the script's sweep: 64, 96, 100 run)", True, "Qwen2.5-7B-Instruct", 1, 80,
         "one", grpo(100, 5, 512, 1024, True, *LORA_7B), "the same settings, padded to the longest sequence",
         "verl packs each micro-batch's real tokens (use_remove_padding) where TRL pads every row to the longest; "
         "the plan's worst case is every row at 1,536 tokens"),
    Case("verl: the same at micro-batch 101", VERL_7B_LORA, "as above, 101",
         "fails (the script's sweep: 101, 102, 104, 112, 128 fail; one GPU, so no batch divisibility)", False,
         "Qwen2.5-7B-Instruct", 1, 80, "one", grpo(101, 101, 512, 1024, True, *LORA_7B), "as above",
         "as above"),
]


def write_shapes(directory: Path) -> dict[str, str]:
    paths = dict(SHIPPED)
    for name, shape in SHAPES.items():
        (directory / name).mkdir(parents=True, exist_ok=True)
        (directory / name / "config.json").write_text(json.dumps(shape))
        paths[name] = str(directory / name)
    return paths


def plan_case(case: Case, model_path: str):
    from coreward.grpo.config import as_train_config
    from coreward.grpo.plan import Hardware, plan_run, processes
    from coreward.runtime.memory import GIB

    hardware = Hardware(case.gpus, case.gpu_gib * GIB, case.engine)
    with processes(hardware):
        config = as_train_config(str(REPO / "configs" / "demo" / "rule.yaml"),
                                 [f"model.name_or_path={model_path}", "grpo.gradient_accumulation_steps=1",
                                  *case.sets])
    return plan_run(config, hardware)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_shapes(Path(tmp))
        for case in CASES:
            plan = plan_case(case, paths[case.model])
            case.verdict = {"fits": plan.fits, "peak_gib": plan.peak_bytes / 1024**3, "phase": plan.peak_phase,
                            "device_gib": plan.device_bytes / 1024**3}
    disagreements = 0
    if args.markdown:
        print("| published run (source) | settings | outcome | coreward run (mapping) | plan | agrees |")
        print("|---|---|---|---|---|---|")
    for case in CASES:
        v = case.verdict
        said = f"{'fits' if v['fits'] else 'does NOT fit'}: {v['peak_gib']:.1f} of {v['device_gib']:.0f} GiB ({v['phase']})"
        agrees = v["fits"] == case.ran
        if case.comparable:
            agreement = f"{'yes' if agrees else 'no'}, not counted: {case.comparable}"
        else:
            agreement = "yes" if agrees else "**no**"
            disagreements += not agrees
        if args.markdown:
            print(f"| [{case.name}]({case.source}) | {case.settings} | {case.outcome} | {case.gpus} x {case.gpu_gib} "
                  f"GiB, {case.engine}: {case.mapping} | {said} | {agreement} |")
        else:
            print(f"{case.name}\n    outcome: {case.outcome}\n    plan:    {said}\n    agrees:  {agreement}")
    counted = sum(not c.comparable for c in CASES)
    print(f"\n{counted - disagreements} of {counted} comparable cases agree; {len(CASES) - counted} not comparable")
    sys.exit(1 if disagreements else 0)


if __name__ == "__main__":
    main()
