#!/bin/bash
# One machine's part of a multi-node coreward run: `accelerate launch` of `coreward train` as machine
# MACHINE_RANK, with SIGUSR1 / SIGTERM passed on to its training processes (they finish the step in progress,
# write a complete checkpoint and exit 75; continue with --resume). train_multinode.sbatch runs it once per
# node through srun; without SLURM run it on every machine yourself:
#
#   MACHINE_RANK=0 MAIN_HOST=node01 NUM_MACHINES=2 GPUS_PER_NODE=8 bash configs/slurm/launch_node.sh CONFIG RUN_DIR
#   MACHINE_RANK=1 MAIN_HOST=node01 NUM_MACHINES=2 GPUS_PER_NODE=8 bash configs/slurm/launch_node.sh CONFIG RUN_DIR
#
# Further arguments go to `coreward train` (--set k=v, --max-steps N, --resume or --resume-if-any).
set -uo pipefail
CONFIG=${1:?usage: launch_node.sh CONFIG RUN_DIR [coreward train arguments]}
RUN_DIR=${2:?usage: launch_node.sh CONFIG RUN_DIR [coreward train arguments]}
shift 2
MACHINE_RANK=${MACHINE_RANK:-${SLURM_NODEID:?set MACHINE_RANK (0 on the main host)}}
NUM_MACHINES=${NUM_MACHINES:-${SLURM_NNODES:?set NUM_MACHINES}}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
MAIN_HOST=${MAIN_HOST:?set MAIN_HOST (machine 0 address, reachable from every node)}
MAIN_PORT=${MAIN_PORT:-29500}
ACCELERATE_CONFIG=${ACCELERATE_CONFIG:-configs/accelerate/multi_node.yaml}
# PYTHON: the interpreter with coreward installed (default: python on PATH)

"${PYTHON:-python}" -m accelerate.commands.launch --config_file "$ACCELERATE_CONFIG" \
  --num_machines "$NUM_MACHINES" --num_processes $((NUM_MACHINES * GPUS_PER_NODE)) \
  --machine_rank "$MACHINE_RANK" --main_process_ip "$MAIN_HOST" --main_process_port "$MAIN_PORT" \
  -m coreward.cli train --config "$CONFIG" --output-dir "$RUN_DIR" "$@" &
LAUNCHER=$!
# accelerate runs torchrun's agent in its own process; the training processes are its children
trap 'echo "machine $MACHINE_RANK: passing the signal on to the training processes"; pkill -USR1 -P "$LAUNCHER"' USR1 TERM
STATUS=0
while kill -0 "$LAUNCHER" 2>/dev/null; do
  wait "$LAUNCHER"; STATUS=$?      # a trapped signal ends `wait` early: wait again until the launcher is gone
done
exit "$STATUS"
