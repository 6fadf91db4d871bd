#!/bin/bash
# Preregistration part F (docs/preregistration.md): the shipped step of configs/smol/rule.yaml against the old one
# (rollouts from the training module), 12 seeds, 20 steps, two runs side by side with one thread each, then the
# registered evaluations two at a time. From the repository root; run it again to resume (a run with final/, an
# evaluation with results.json, is skipped; a run stopped midway starts again from its last checkpoint).
set -uo pipefail
OUT=runs/prereg/shipped
mkdir -p "$OUT"
echo "$(date -u +%FT%T) part F at $(git rev-parse --short HEAD)" | tee -a "$OUT/run.log"
train() {  # ARM SEED [--set ...]
    local arm=$1 seed=$2; shift 2
    local dir="$OUT/$arm-s$seed"
    [ -d "$dir/final" ] && return 0
    coreward train --config configs/smol/rule.yaml --set seed="$seed" --set torch_threads=1 "$@" \
        --output-dir "$dir" --resume-if-any >> "$OUT/$arm-s$seed.log" 2>&1
    echo "$(date -u +%FT%T) $arm seed $seed exit $?" | tee -a "$OUT/run.log"
}
evaluate() {  # ARM SEED
    local dir="$OUT/eval-$1-s$2"
    [ -f "$dir/results.json" ] && return 0
    coreward eval --model "$OUT/$1-s$2/final" --benchmarks arith --n 8 --temperature 0.7 --top-p 0.95 \
        --max-new-tokens 128 --batch-size 16 --seed 0 --output "$dir" >> "$OUT/eval-$1-s$2.log" 2>&1
    echo "$(date -u +%FT%T) eval $1 seed $2 exit $?" | tee -a "$OUT/run.log"
}
for seed in $(seq 3200 3211); do
    train old "$seed" --set sampling.engine=policy --set micro_batches=random &
    train new "$seed" &
    wait
done
for seed in $(seq 3200 3211); do
    evaluate old "$seed" &
    evaluate new "$seed" &
    wait
done
echo "$(date -u +%FT%T) part F done: python studies/2026-12-05-faster-step-equivalence/analyze.py $OUT 3200-3211" \
    | tee -a "$OUT/run.log"
