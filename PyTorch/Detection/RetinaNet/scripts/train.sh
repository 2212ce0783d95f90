#!/usr/bin/env bash
# Train RetinaNet. One process, or torchrun for --gpus N (NGPU) > 1 on this node; multi-node: --nnodes,
# --node-rank and --rdzv-endpoint HOST:PORT (or NNODES, NODE_RANK, RDZV_ENDPOINT) on every node, or run
# under SLURM (srun, one task per GPU; ranks from SLURM_*). Every other argument goes to retinanet.train
# (python -m retinanet.train --help lists them); --data-dir and --results-dir default to DATA_DIR and
# RESULTS_DIR.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
PY="${PYTHON:-python}"
ZOO_COMMON="$("$PY" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
  { echo "error: ${PY} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
# The launcher sits in common/scripts, beside the installed zoo package.
# shellcheck source=/dev/null
source "${ZOO_COMMON}/scripts/launch_torch.sh"
launch_torch retinanet.train "$@"
