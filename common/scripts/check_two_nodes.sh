#!/usr/bin/env bash
# Two nodes train as one, for any PyTorch model whose scripts/train.sh goes through launch_torch.sh. A model's
# scripts/check_two_nodes.sh runs this with its own train.sh:
#
#   check_two_nodes.sh TRAIN_SH [--gpus-per-node N] [--results-dir DIR] [--port P] [--rtol R] [--] [train.sh options]
#
# On this host it launches TRAIN_SH three times with --log-every 1 --resume none:
#   DIR/one_node        one node of 2N processes (--gpus 2N, rendezvous 127.0.0.1:P)
#   DIR/two_nodes       two nodes of N processes (--nnodes 2 --node-rank 0 and 1, rendezvous 127.0.0.1:P+1), each
#                       on its own N GPUs (CUDA_VISIBLE_DEVICES), one results folder shared as on a cluster
#                       (the rendezvous, not --node-rank, decides which node holds global rank 0)
# then compares the losses of one_node and two_nodes step for step (python -m zoo.compare_runs; exit 1 if a
# step is missing or differs by more than R, relative; 0 asks for equal losses, as on a CPU with gloo).
# Defaults: N=1, DIR=$RESULTS_DIR/two_nodes_check (results/two_nodes_check), P=29531, R=0. Options that are
# not the check's own, and everything after --, go to train.sh. OMP_NUM_THREADS defaults to 1 in both
# layouts, so that both run the same CPU threads per process.
set -euo pipefail
PYTHON="${PYTHON:-python}"
usage() {
  echo "Usage: scripts/check_two_nodes.sh [--gpus-per-node N] [--results-dir DIR] [--port P] [--rtol R] [--] [train.sh options]"
  echo
  sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}
[[ $# -gt 0 && "$1" != -* ]] || { usage >&2; echo "error: the first argument is the model's train.sh" >&2; exit 2; }
TRAIN_SH="$1"; shift
per_node=1 out="${RESULTS_DIR:-results}/two_nodes_check" port=29531 rtol=0 train_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --gpus-per-node) per_node="${2:?--gpus-per-node needs a number}"; shift 2 ;;
    --results-dir) out="${2:?--results-dir needs a folder}"; shift 2 ;;
    --port) port="${2:?--port needs a number}"; shift 2 ;;
    --rtol) rtol="${2:?--rtol needs a number}"; shift 2 ;;
    --tolerance) echo "error: --tolerance is now --rtol" >&2; exit 2 ;;
    --) shift; train_args+=("$@"); break ;;
    *) train_args+=("$1"); shift ;;
  esac
done
[[ "${per_node}" =~ ^[1-9][0-9]*$ ]] || { echo "error: --gpus-per-node must be a whole number >= 1, got '${per_node}'" >&2; exit 2; }
[[ "${port}" =~ ^[1-9][0-9]*$ ]] || { echo "error: --port must be a port number, got '${port}'" >&2; exit 2; }
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
train=(bash "${TRAIN_SH}" --log-every 1 --resume none)
rm -rf "${out}/one_node" "${out}/two_nodes"  # fresh runs: metrics.jsonl is appended to

echo "== one node x $((2 * per_node)) process(es) -> ${out}/one_node"
"${train[@]}" --gpus $((2 * per_node)) --rdzv-endpoint "127.0.0.1:${port}" --results-dir "${out}/one_node" \
  "${train_args[@]}"

echo "== two nodes x ${per_node} process(es) -> ${out}/two_nodes"
launch_node() {  # node rank, its first GPU
  CUDA_VISIBLE_DEVICES="$(seq -s, "$2" $(($2 + per_node - 1)))" "${train[@]}" --gpus "${per_node}" --nnodes 2 \
    --node-rank "$1" --rdzv-endpoint "127.0.0.1:$((port + 1))" --results-dir "${out}/two_nodes" "${train_args[@]}"
}
launch_node 1 "${per_node}" &
node1=$!
launch_node 0 0
wait "${node1}"

exec "${PYTHON}" -m zoo.compare_runs "${out}/one_node" "${out}/two_nodes" --rtol "${rtol}"
