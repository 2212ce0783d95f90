#!/usr/bin/env bash
# One node against two: the same pretraining run launched as 1 node x 2N processes and as 2 nodes x N
# processes (two scripts/train.sh launches on this machine, --nnodes 2 --node-rank 0 and 1, each node on
# its own N GPUs) must log the same losses step for step (every step is logged).
#   scripts/check_two_nodes.sh --gpus-per-node 2 --results-dir /tmp/nodes -- \
#       --recipe configs/pretrain_phase1_8gpu.yaml --synthetic --steps 20 --set run.accumulation=2
# Prints both runs' losses per step and the largest relative difference; exits 1 if a step is missing or
# the difference is above --tolerance (default 1e-5; 0 asks for equal losses, as on a CPU with gloo).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
per_node=1 results="${RESULTS_DIR:-results}/two_nodes" port=29611 tolerance=1e-5
usage() {
  sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  echo "usage: check_two_nodes.sh [--gpus-per-node N] [--results-dir DIR] [--port PORT] [--tolerance T] -- [train.sh options]"
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --gpus-per-node) per_node=$2; shift 2 ;;
    --results-dir) results=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --tolerance) tolerance=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "error: unknown option $1 (train.sh options go after --)" >&2; exit 2 ;;
  esac
done
# the same threads in both layouts (launch_torch.sh would give each process the node's cores / N)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
first="$(seq -s, 0 $((per_node - 1)))" second="$(seq -s, "$per_node" $((2 * per_node - 1)))"
train=("${MODEL_DIR}/scripts/train.sh" --log-every 1 --resume none)
echo "== 1 node x $((2 * per_node)) processes" >&2
"${train[@]}" --gpus $((2 * per_node)) --rdzv-endpoint "127.0.0.1:${port}" --results-dir "${results}/one_node" "$@"
echo "== 2 nodes x ${per_node} processes" >&2
two=(--gpus "$per_node" --nnodes 2 --rdzv-endpoint "127.0.0.1:$((port + 1))")
CUDA_VISIBLE_DEVICES="$first" "${train[@]}" "${two[@]}" --node-rank 0 --results-dir "${results}/two_nodes" "$@" &
node0=$!
CUDA_VISIBLE_DEVICES="$second" "${train[@]}" "${two[@]}" --node-rank 1 --results-dir "${results}/node1" "$@"
wait "$node0"
exec "$PYTHON" - "${results}/one_node/metrics.jsonl" "${results}/two_nodes/metrics.jsonl" "$tolerance" <<'COMPARE'
import json, sys

def losses(path):
    rows = (json.loads(line) for line in open(path))
    return {r["step"]: r["metrics"]["loss"] for r in rows if r["phase"] == "train"}

one, two, tolerance = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
print(f"{'step':>5} {'1 node':>12} {'2 nodes':>12}")
for step in sorted(one | two):
    print(f"{step:>5} {one.get(step, float('nan')):>12.6f} {two.get(step, float('nan')):>12.6f}")
if one.keys() != two.keys():
    sys.exit(f"error: steps logged differ: {sorted(one.keys() ^ two.keys())}")
worst = max(abs(one[s] - two[s]) / max(abs(one[s]), 1e-12) for s in one)
print(f"largest relative difference {worst:.3g} over {len(one)} steps (tolerance {tolerance:g})")
sys.exit(1 if worst > tolerance else 0)
COMPARE
