#!/bin/bash
# Preregistration part A's two registered `coreward map` commands, from the repository root; run it again to resume
# (finished cells are skipped). Then the comparison and analyze.py of this folder (README.md).
set -euo pipefail
S=1000,1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012,1013,1014,1015
echo "$(date -u +%FT%T) map 1 at $(git rev-parse --short HEAD)"
coreward map --config configs/demo/rule.yaml --config configs/map/co_optimized_rm_lr_4e-4.yaml \
  --config configs/demo/cooper.yaml --config configs/demo/ensemble_min.yaml --config configs/map/model_pooled.yaml \
  --lr 2e-4 --horizons 30,60,120 --seeds $S --jobs 2 --set data.eval_every=0 --output runs/prereg/demo
echo "$(date -u +%FT%T) map 2"
coreward map --config configs/demo/model.yaml --lr 2e-4 --horizons 30,60,120,144 --seeds $S --jobs 2 \
  --set data.eval_every=0 --output runs/prereg/demo_frozen
echo "$(date -u +%FT%T) maps done"
