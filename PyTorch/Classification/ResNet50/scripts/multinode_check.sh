#!/usr/bin/env bash
# Two nodes train as one: the same recipe launched as one node of 2N processes and as two nodes of N
# (two train.sh launches on this host, --nnodes 2 --node-rank 0/1), losses compared step for step.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
Usage: scripts/multinode_check.sh [--gpus-per-node N] [--results-dir DIR] [--rtol R] [--port P] [train.sh flags ...]

Runs scripts/train.sh three times on this host (fresh results folders, --log-every 1):
  DIR/one_node    one node of 2N processes (--gpus 2N)
  DIR/two_nodes   two nodes of N processes each (--nnodes 2 --node-rank 0 and 1, --rdzv-endpoint 127.0.0.1:P),
                  node r on the GPUs r*N .. r*N+N-1 (CUDA_VISIBLE_DEVICES)
then compares their losses step for step (python -m resnet50.compare_runs, relative tolerance R, default 0).
Defaults: N=1, DIR=results/multinode_check, P=29531 (the one-node run uses P+1).
Examples:
  scripts/multinode_check.sh --gpus-per-node 2 --rtol 1e-3 --recipe configs/resnet50_8gpu_90ep.yaml --synthetic \
    --epochs 1 --steps-per-epoch 30 --set train.cudnn_benchmark=false      # 4 GPUs: 2 nodes x 2 against 1 x 4
  scripts/multinode_check.sh --recipe configs/digits_cpu.yaml --data-dir /data/digits16 --device cpu \
    --image-size 16 --epochs 1 --steps-per-epoch 3                          # CPU, gloo: 2 x 1 against 1 x 2
USAGE
}

PER_NODE=1
OUT="results/multinode_check"
RTOL=0
PORT=29531
TRAIN_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --gpus-per-node) PER_NODE="${2:?--gpus-per-node needs a number}"; shift 2 ;;
    --results-dir) OUT="${2:?--results-dir needs a folder}"; shift 2 ;;
    --rtol) RTOL="${2:?--rtol needs a number}"; shift 2 ;;
    --port) PORT="${2:?--port needs a number}"; shift 2 ;;
    *) TRAIN_ARGS+=("$1"); shift ;;
  esac
done
[[ "${PER_NODE}" =~ ^[1-9][0-9]*$ ]] || { echo "error: --gpus-per-node must be a whole number >= 1, got '${PER_NODE}'" >&2; exit 2; }
TRAIN=("${MODEL_DIR}/scripts/train.sh" "${TRAIN_ARGS[@]}" --log-every 1)
rm -rf "${OUT}/one_node" "${OUT}/two_nodes"  # fresh runs: metrics.jsonl is appended to

echo "== one node x $((2 * PER_NODE)) process(es) -> ${OUT}/one_node"
"${TRAIN[@]}" --gpus $((2 * PER_NODE)) --rdzv-endpoint "127.0.0.1:$((PORT + 1))" --results-dir "${OUT}/one_node"

echo "== two nodes x ${PER_NODE} process(es) -> ${OUT}/two_nodes"
launch_node() {  # node rank, then its first GPU
  CUDA_VISIBLE_DEVICES="$(seq -s, "$2" $(($2 + PER_NODE - 1)))" "${TRAIN[@]}" --gpus "${PER_NODE}" --nnodes 2 \
    --node-rank "$1" --rdzv-endpoint "127.0.0.1:${PORT}" --results-dir "${OUT}/two_nodes"
}
launch_node 1 "${PER_NODE}" &
NODE1=$!
launch_node 0 0
wait "${NODE1}"

exec "${PYTHON}" -m resnet50.compare_runs "${OUT}/one_node" "${OUT}/two_nodes" --rtol "${RTOL}"
