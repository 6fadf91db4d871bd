"""GPU memory calibration: what each engine's training step holds on a GPU, against `coreward plan`.

    python benchmarks/gpu_memory_check.py --out $OUT              # a lent GPU (one H100 or H200 is enough): < 8 min
    python benchmarks/gpu_memory_check.py --out DIR --dry-run     # no GPU: each part's command and plan, nothing run

Each part is one `coreward train` of 2 steps (a process, or an `accelerate launch` of 2) on a random policy of
Qwen2.5-0.5B's shape in bf16 (`--shape 1.5b`: Qwen2.5-1.5B's), built here with gpu_check.py's stand-in tokenizer
(nothing is downloaded); 4 prompts x 8 completions of 128 tokens a step:

    one          one process, transformers generation
    ddp          DDP, 2 processes
    zero2        DeepSpeed ZeRO-2, 2 processes
    zero3        DeepSpeed ZeRO-3, 2 processes
    fsdp2        FSDP2, 2 processes
    vllm_awake   one process, colocated vLLM (0.3 of the GPU) held through the step
    vllm_sleep   the same, vLLM asleep outside generation (`grpo.vllm_enable_sleep_mode`)
    cooper       Cooper with its RM update running (benchmarks/gpu/gpu_memory_cooper.py gives every group a positive made
                 from a reference completion: random weights verify nothing), the RM settings of
                 configs/paper/cooper_gsm8k_qwen2.5-1.5b.yaml (bf16 RM, float32 masters, offloaded and stepped on the
                 GPU, 4,096 tokens a pass), colocated vLLM asleep as in that config where vLLM is installed

Recorded per part (JSON and a markdown table under --out, written after every part): each process's
`torch.cuda.max_memory_allocated` and `max_memory_reserved` (its run's memory.json, memory-rank1.json), the device's
used memory at its peak (nvidia-smi, polled every 0.2 s, less what was in use before the part), and `coreward plan`
for the same config and hardware: its peak per process, the part of it PyTorch's allocator hands out (the peak over
phases without the items no allocator holds: vLLM's, the CUDA context, an allocator-reserve margin), and the
device's total (the peak times the processes on the GPU).

Two processes on a one-GPU machine share that GPU: both take LOCAL_RANK 0 and talk over gloo (NCCL refuses two
ranks on one device). That leaves out NCCL's own buffers and communicators (gloo stages collectives through host
memory), and the timing of two GPUs; each process still holds its half of the sharded states, so the per-process
terms are those of 2 GPUs, and the device's used memory is both processes' (two CUDA contexts) together. On a
machine with 2 or more GPUs each process has its own and NCCL is used.

A part whose library is missing (deepspeed, vllm) is recorded as skipped with the reason; each part has a time
budget (`timeout_s`, killed past it) and parts not started within `--budget` seconds are skipped as well.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.gpu import gpu_check  # stdlib-only at import: its models, tokenizer, machine lines


REPO = Path(__file__).resolve().parents[2]


COOPER_SOURCE = "benchmarks.gpu.gpu_memory_cooper:CooperWithReferencePositives"
PAPER_COOPER = REPO / "configs" / "paper" / "cooper_gsm8k_qwen2.5-1.5b.yaml"
# the paper config's RM settings the cooper part runs with (its memory terms are what the part calibrates)
COOPER_RM_SETTINGS = ("rm_dtype", "master_weights", "batch_size", "minibatch_size", "param_offload",
                      "optimizer_offload", "optimizer_offload_step", "max_tokens_per_pass", "step_without_pairs")
# plan items PyTorch's caching allocator never hands out (vLLM allocates its own; the context is the driver's)
NOT_IN_TORCH_ALLOCATOR = ("vLLM", "CUDA context", "allocator reserve", "NCCL")  # NCCL allocates its own buffers

SHAPES = {
    "0.5b": {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
             "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "hidden_act": "silu",
             "max_window_layers": 21, "sliding_window": None, "use_sliding_window": False},
    "1.5b": gpu_check.QWEN25_15B,
}
BATCH = {"prompts": 4, "generations": 8, "completion_tokens": 128, "steps": 2, "vllm_memory": 0.3}


@dataclass
class Part:
    name: str
    engine: str = "one"  # one | ddp | zero2 | zero3 | fsdp2
    vllm: str | None = None  # None: transformers generation; "awake" | "sleep": colocated vLLM
    cooper: bool = False
    timeout_s: int = 100  # killed past it
    needs: tuple[str, ...] = ()  # libraries beyond coreward's own
    overrides: list[str] = field(default_factory=list)

    @property
    def processes(self) -> int:
        return 1 if self.engine == "one" else 2


ACCELERATE_CONFIG = {"ddp": "multi_gpu.yaml", "zero2": "zero2.yaml", "zero3": "zero3.yaml", "fsdp2": "fsdp2.yaml"}
PARTS = {p.name: p for p in [
    Part("one", timeout_s=80),
    Part("ddp", engine="ddp", timeout_s=90),
    Part("zero2", engine="zero2", timeout_s=100, needs=("deepspeed",)),
    Part("zero3", engine="zero3", timeout_s=100, needs=("deepspeed",)),
    Part("fsdp2", engine="fsdp2", timeout_s=90),
    Part("vllm_awake", vllm="awake", timeout_s=150, needs=("vllm",)),
    Part("vllm_sleep", vllm="sleep", timeout_s=120, needs=("vllm",)),
    Part("cooper", cooper=True, timeout_s=120),
]}


# --------------------------------------------------------------------------- what a part runs
def missing_library(part: Part) -> str | None:
    """The reason a part cannot run here (a library it needs is not installed), or None."""
    missing = [name for name in part.needs if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def cooper_rm_settings() -> dict:
    from coreward.runtime.config import read_yaml_with_base

    params = read_yaml_with_base(PAPER_COOPER)["rewards"][0]["params"]
    return {key: params[key] for key in COOPER_RM_SETTINGS if key in params}


def train_overrides(part: Part, policy: Path, rm: Path, use_vllm: bool) -> list[str]:
    """`--set` items of the part's `coreward train` (and of its plan)."""
    rows = BATCH["prompts"] * BATCH["generations"]
    overrides = [f"model.name_or_path={policy}", "model.dtype=bfloat16", f"data.limit={BATCH['prompts'] * 4}",
                 "data.eval_every=0", "data.eval=null", f"grpo.num_generations={BATCH['generations']}",
                 f"grpo.per_device_train_batch_size={rows // part.processes}", "grpo.gradient_accumulation_steps=1",
                 f"grpo.max_completion_length={BATCH['completion_tokens']}", "grpo.save_strategy='no'",
                 f"grpo.use_vllm={str(use_vllm).lower()}"]
    if use_vllm:
        sleeps = part.vllm == "sleep" or part.cooper
        overrides += ["grpo.vllm_mode=colocate", f"grpo.vllm_gpu_memory_utilization={BATCH['vllm_memory']}",
                      "grpo.vllm_max_model_length=1024", f"grpo.vllm_enable_sleep_mode={str(sleeps).lower()}"]
    if part.cooper:
        overrides += [f"rewards.0.name={COOPER_SOURCE}", f"rewards.0.params.rm={rm}", "rewards.0.params.eval_every=0"]
        overrides += [f"rewards.0.params.{key}={json.dumps(value)}" for key, value in cooper_rm_settings().items()]
    return overrides + part.overrides


def part_command(part: Part, policy: Path, rm: Path, run_dir: Path, gpus: int, use_vllm: bool) -> list[str]:
    config = REPO / "configs" / "demo" / ("cooper.yaml" if part.cooper else "rule.yaml")
    train = ["train", "--config", str(config), "--output-dir", str(run_dir), "--max-steps", str(BATCH["steps"])]
    for item in train_overrides(part, policy, rm, use_vllm):
        train += ["--set", item]
    if part.processes == 1:
        return [sys.executable, "-m", "coreward.cli", *train]
    share = ["--share-gpu"] if gpus < part.processes else []
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(REPO / "configs" / "accelerate" / ACCELERATE_CONFIG[part.engine]), "--num_processes",
            str(part.processes), "--main_process_port", "0", "--mixed_precision", "bf16", str(Path(__file__).resolve()),
            "--rank-child", *share, *train]


def rank_child(argv: list[str]) -> None:
    """One process of a distributed part: with --share-gpu every process takes GPU 0 and the process group is gloo
    (NCCL refuses two ranks on one device), set up before accelerate, DeepSpeed or FSDP look for one."""
    if argv and argv[0] == "--share-gpu":
        argv = argv[1:]
        os.environ["LOCAL_RANK"] = "0"
        import torch
        import torch.distributed as dist

        torch.cuda.set_device(0)
        dist.init_process_group("gloo")
    from coreward.cli import main

    sys.argv = ["coreward", *argv]
    main()


# --------------------------------------------------------------------------- the plan
def planned(part: Part, policy: Path, rm: Path, use_vllm: bool, device_bytes: int) -> dict:
    """`coreward plan --json` of the part (in this process: nothing touches the GPU), with what of its peak PyTorch's
    allocator holds and what the device holds with every process of the part on it."""
    from coreward.cli import app

    config = REPO / "configs" / "demo" / ("cooper.yaml" if part.cooper else "rule.yaml")
    args = ["plan", "--config", str(config), "--json", "--gpus", str(part.processes), "--engine", part.engine,
            "--gpu-memory", f"{device_bytes // 2**20}MiB"]
    for item in train_overrides(part, policy, rm, use_vllm):
        args += ["--set", item]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = app(args=args, standalone_mode=False)
    if status not in (None, 0, 3):
        raise RuntimeError(f"coreward plan exited {status}")
    plan = json.loads(out.getvalue())
    in_allocator = [i for i in plan["items"] if not i["name"].startswith(NOT_IN_TORCH_ALLOCATOR)]
    allocator_phases = {phase: sum(i["bytes"] for i in in_allocator if phase in i["phases"]) for phase in plan["phases"]}
    allocator_phase = max(allocator_phases, key=allocator_phases.get)
    return {"peak_bytes": plan["peak_bytes"], "peak_phase": plan["peak_phase"],
            "allocator_bytes": allocator_phases[allocator_phase], "allocator_phase": allocator_phase,
            "device_total_bytes": plan["peak_bytes"] * part.processes if part.processes > 1 else plan["peak_bytes"],
            "fits": plan["fits"], "items": {i["name"]: i["bytes"] for i in plan["items"]},
            "unmeasured_on_gpu": plan["unmeasured_on_gpu"]}


# --------------------------------------------------------------------------- a run
def gpu_table() -> list[dict]:
    """nvidia-smi's GPUs (index, name, total and used MiB); [] without one. The check never makes a CUDA context
    of its own, so the device's used memory is the parts' alone."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.count(",") == 3]
    return [{"index": int(i), "name": n, "total_bytes": int(t) * 2**20, "used_bytes": int(u) * 2**20} for i, n, t, u in rows]


def measured(run_dir: Path, processes: int) -> dict:
    """Each process's memory.json (the main one) and memory-rank1.json: max_memory_allocated and _reserved."""
    ranks = []
    for rank in range(processes):
        path = run_dir / ("memory.json" if rank == 0 else f"memory-rank{rank}.json")
        if path.is_file():
            m = json.loads(path.read_text())["measured"]
            ranks.append({"rank": rank, "max_memory_allocated": m.get("max_memory_allocated", m["peak_bytes"]),
                          "max_memory_reserved": m.get("max_memory_reserved")})
    return {"ranks": ranks}


def rm_updates(run_dir: Path) -> int:
    """Steps whose metrics say the RM learned (an `rm/loss`)."""
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return sum("rm/loss" in json.loads(line) for line in lines if line.strip())


def run_part(part: Part, policy: Path, rm: Path, root: Path, gpus: int, device_bytes: int, timeout_s: float,
             dry_run: bool) -> dict:
    result = {"part": part.name, "engine": part.engine, "processes": part.processes, "timeout_s": round(timeout_s)}
    why = missing_library(part)
    if why:
        return result | {"status": "skipped", "why": why}
    # Cooper generates with vLLM asleep, as the paper config, where vLLM is installed (else with transformers)
    use_vllm = part.vllm is not None or (part.cooper and importlib.util.find_spec("vllm") is not None)
    result["generation"] = "vllm" + (" asleep" if part.vllm == "sleep" or part.cooper else "") if use_vllm else "transformers"
    result["processes_per_gpu"] = part.processes if gpus < part.processes else 1
    try:
        result["plan"] = planned(part, policy, rm, use_vllm, device_bytes)
    except Exception as err:  # noqa: BLE001  the part still runs and is measured; its row says why there is no plan
        result["plan"] = {"why": f"coreward plan failed: {type(err).__name__}: {err}"}
    if part.processes > 1 and result["processes_per_gpu"] == 1:  # one GPU each: each device holds one process's plan
        result["plan"]["device_total_bytes"] = result["plan"]["peak_bytes"]
    run_dir = root / part.name
    command = part_command(part, policy, rm, run_dir, gpus, use_vllm)
    result["command"] = shlex.join(command)
    if dry_run:
        return result | {"status": "dry run (not measured)"}
    before = {g["index"]: g["used_bytes"] for g in gpu_table()}
    start = time.perf_counter()
    returncode, log, peak = gpu_check.run_logged(command, max(gpus, 1), timeout_s)
    result["seconds"] = round(time.perf_counter() - start, 1)
    used = {device: gib * 2**30 - before.get(int(device.split(":")[1]), 0) for device, gib in peak.items()}
    result["device_used_bytes"] = max(used.values()) if used else None
    result["measured"] = measured(run_dir, part.processes)
    if part.cooper:
        result["rm_updates"] = rm_updates(run_dir)
    result["status"] = "ok" if returncode == 0 else "timed out" if returncode in (-9, 137) else f"failed ({returncode})"
    if returncode == 0 and part.cooper and not result["rm_updates"]:
        result["status"] = "failed (no RM update)"
    if result["status"] != "ok":
        result["log_tail"] = log[-3000:]
    import shutil

    shutil.rmtree(run_dir, ignore_errors=True)
    return result


# --------------------------------------------------------------------------- the report
def gib(value) -> str:
    return "–" if value is None else f"{value / 2**30:.2f}"


def ratio(value, plan) -> str:
    return "–" if value is None or not plan else f"{value / plan:.2f}"


def table(report: dict) -> str:
    lines = [f"# GPU memory check, {report['date']}", "",
             f"- machine: {report['machine']}", f"- commit: {report['commit']}", f"- command: `{report['command']}`",
             f"- {report['models']}; {report['batch']}", "",
             "GiB per process unless said; allocated and reserved: PyTorch's `max_memory_allocated` and "
             "`max_memory_reserved` of the process that peaked highest; device used: nvidia-smi's at its peak less "
             "what was in use before, every process of the part together.", "",
             "| part | status | processes (on one GPU) | generation | planned peak (phase) | planned in torch's allocator "
             "| max allocated | allocated / planned | max reserved | reserved / planned | device used | planned for the "
             "device | used / planned | s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["parts"]:
        plan = r.get("plan") or {}
        ranks = (r.get("measured") or {}).get("ranks") or []
        allocated = max((x["max_memory_allocated"] for x in ranks), default=None)
        reserved = max((x["max_memory_reserved"] or 0 for x in ranks), default=None) or None
        status = r["status"] + (f": {r['why']}" if r.get("why") else "")
        lines.append(
            f"| {r['part']} | {status} | {r['processes']} ({r.get('processes_per_gpu', '–')}) | {r.get('generation', '–')} | "
            f"{gib(plan.get('peak_bytes'))} ({plan.get('peak_phase', '–')}) | {gib(plan.get('allocator_bytes'))} | "
            f"{gib(allocated)} | {ratio(allocated, plan.get('allocator_bytes'))} | {gib(reserved)} | "
            f"{ratio(reserved, plan.get('allocator_bytes'))} | {gib(r.get('device_used_bytes'))} | "
            f"{gib(plan.get('device_total_bytes'))} | {ratio(r.get('device_used_bytes'), plan.get('device_total_bytes'))} | "
            f"{r.get('seconds', '–')} |")
    for r in report["parts"]:
        if r["part"] == "cooper" and "rm_updates" in r:
            lines.append(f"\ncooper: {r['rm_updates']} of {BATCH['steps']} steps updated the RM")
    return "\n".join(lines) + "\n"


def build_models(root: Path, shape: dict, weights: bool) -> tuple[Path, Path]:
    """The random bf16 policy and a VerifyRM of its shape; without `weights` (a dry run) their config.json and the
    tokenizer only, which is all the plan reads."""
    from transformers import Qwen2Config

    tokenizer = gpu_check.standin_tokenizer(shape["vocab_size"])
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    if not weights:
        for name in ("policy", "rm"):
            Qwen2Config(**shape, **ids, torch_dtype="bfloat16").save_pretrained(root / name)
            tokenizer.save_pretrained(root / name)
        return root / "policy", root / "rm"
    import torch
    from transformers import Qwen2ForCausalLM

    from coreward.rm.model import VerifyRM

    torch.manual_seed(0)
    policy = Qwen2ForCausalLM(Qwen2Config(**shape, **ids)).to(torch.bfloat16)
    policy.generation_config.pad_token_id = tokenizer.pad_token_id
    policy.save_pretrained(root / "policy")
    tokenizer.save_pretrained(root / "policy")
    del policy
    VerifyRM.from_backbone(root / "policy", device="cpu", add_template_tokens=False, max_length=1024).save_pretrained(root / "rm")
    return root / "policy", root / "rm"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--rank-child":
        rank_child(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON and the markdown table")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {','.join(PARTS)}")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.5b", help="the policy's and the RM's shape")
    parser.add_argument("--budget", type=float, default=420,
                        help="seconds for all parts: a part not started by then is skipped, one started gets at most what is left")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: each part's command and plan, nothing run")
    parser.add_argument("--gpu-memory", default="80GiB", help="the GPU the dry run plans for (a real run reads nvidia-smi)")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
    gpus_found = gpu_table()
    if not gpus_found and not args.dry_run:
        parser.error("no GPU (nvidia-smi found none): run it where there is one, or with --dry-run")
    from coreward.grpo.plan import memory_size

    gpus = len(gpus_found) if not args.dry_run else 1
    device_bytes = gpus_found[0]["total_bytes"] if gpus_found and not args.dry_run else memory_size(args.gpu_memory)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": gpu_check.commit(),
              "command": shlex.join(["python", "benchmarks/gpu_memory_check.py", *argv]),
              "machine": ", ".join(f"{g['name']} ({g['total_bytes'] // 2**20} MiB)" for g in gpus_found) if gpus_found
              and not args.dry_run else f"dry run: planned for 1 x {args.gpu_memory}, nothing measured",
              "models": f"random Qwen2.5-{args.shape.upper()}-shaped policy and RM in bf16",
              "batch": f"{BATCH['prompts']} prompts x {BATCH['generations']} completions of {BATCH['completion_tokens']} "
                       f"tokens a step, {BATCH['steps']} steps", "dry_run": args.dry_run, "parts": []}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"gpu_memory_check-{time.strftime('%Y%m%d-%H%M', time.gmtime())}-{'dry-run' if args.dry_run else 'gpu'}"

    def write() -> str:  # after every part: a device lease that ends mid-check keeps what was measured
        text = table(report)
        (args.out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / f"{stem}.md").write_text(text)
        return text

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        policy, rm = build_models(Path(tmp), SHAPES[args.shape], weights=not args.dry_run)
        print(f"models built ({time.perf_counter() - started:.0f} s)", flush=True)
        for name in parts:
            part, left = PARTS[name], args.budget - (time.perf_counter() - started)
            if left < 30 and not args.dry_run:
                report["parts"].append({"part": name, "engine": part.engine, "processes": part.processes,
                                        "status": "skipped", "why": f"the --budget of {args.budget:.0f} s was spent"})
            else:
                report["parts"].append(run_part(part, policy, rm, Path(tmp), gpus, device_bytes,
                                                min(part.timeout_s, left), args.dry_run))
            print(f"  {name}: {report['parts'][-1]['status']}", flush=True)
            write()
    print("\n" + write())
    print(f"written: {args.out / stem}.json, .md")
    ok = ("ok", "skipped", "dry run (not measured)")
    return 0 if all(r["status"] in ok for r in report["parts"]) else 1


if __name__ == "__main__":
    sys.exit(main())
