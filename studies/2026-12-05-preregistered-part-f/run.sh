#!/bin/bash
# Preregistration part F (docs/preregistration.md): the shipped step of configs/smol/rule.yaml against the old one
# (rollouts from the training module), 12 seeds, 20 steps, the registered commands two at a time with one thread each.
# A queue of 24 jobs (old and new of seed 3200, then 3201, ...), each training its run and then evaluating it, so
# both cores stay busy while the slower old arm runs and a stop leaves whole seeds behind. From the repository root;
# run it again to resume (a run with final/, an evaluation with results.json, is skipped; a run stopped midway starts
# again from its last checkpoint). Evaluations run with one thread too (OMP_NUM_THREADS=1), as the trainings do.
set -uo pipefail
OUT=runs/prereg/shipped
mkdir -p "$OUT"
echo "$(date -u +%FT%T) part F at $(git rev-parse --short HEAD)" | tee -a "$OUT/run.log"
job() {  # ARM SEED
    local arm=$1 seed=$2 extra=()
    [ "$arm" = old ] && extra=(--set sampling.engine=policy --set micro_batches=random)
    local run="$OUT/$arm-s$seed" eval="$OUT/eval-$arm-s$seed"
    if [ ! -d "$run/final" ]; then
        coreward train --config configs/smol/rule.yaml --set seed="$seed" --set torch_threads=1 "${extra[@]}" \
            --output-dir "$run" --resume-if-any >> "$OUT/$arm-s$seed.log" 2>&1
        echo "$(date -u +%FT%T) $arm seed $seed exit $?" | tee -a "$OUT/run.log"
    fi
    [ -d "$run/final" ] || return 1
    if [ ! -f "$eval/results.json" ]; then
        OMP_NUM_THREADS=1 PYTHONPATH="${EVAL_PYTHONPATH:-${PYTHONPATH:-}}" coreward eval --model "$run/final" --benchmarks arith --n 8 --temperature 0.7 --top-p 0.95 \
            --max-new-tokens 128 --batch-size 16 --seed 0 --output "$eval" >> "$OUT/eval-$arm-s$seed.log" 2>&1
        echo "$(date -u +%FT%T) eval $arm seed $seed exit $?" | tee -a "$OUT/run.log"
    fi
}
export -f job
export OUT
echo "$(date -u +%FT%T) seeds ${FIRST_SEED:-3200}-3211; evaluations from ${EVAL_PYTHONPATH:-the same code}" | tee -a "$OUT/run.log"
for seed in $(seq "${FIRST_SEED:-3200}" 3211); do printf 'old %s\nnew %s\n' "$seed" "$seed"; done \
    | xargs -P 2 -L 1 bash -c 'job "$0" "$1"'
echo "$(date -u +%FT%T) part F done: python studies/2026-12-05-faster-step-equivalence/analyze.py $OUT 3200-3211" \
    | tee -a "$OUT/run.log"
