#!/usr/bin/env bash
# Train the 3D U-Net: one process, or torchrun over NGPU GPUs and several nodes.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
Usage: scripts/train.sh [--gpus N] [--nnodes N] [--node-rank R] [--rdzv-endpoint HOST:PORT]
                        [--recipe configs/X.yaml] [--set KEY=VALUE ...] [--amp {bf16,fp16,fp32}]
                        [--resume {auto,PATH,none}] [--target-dice FRACTION] [--data-dir DIR | --synthetic]
                        [--results-dir DIR] [any python -m unet3d.train flag ...]

--gpus N: processes (GPUs) per node, the same as the environment variable NGPU (default 1).
Environment: NGPU, NNODES, DATA_DIR, RESULTS_DIR, PYTHON.
With NGPU>1 or NNODES>1 the run is launched with torchrun (c10d rendezvous).
Examples:
  scripts/train.sh --recipe configs/unet3d_kits19_1gpu.yaml --data-dir /data/kits19_npy
  NGPU=8 scripts/train.sh --recipe configs/unet3d_kits19_8gpu.yaml --data-dir /data/kits19_npy --target-dice 0.908
  scripts/train.sh --recipe configs/synthetic_cpu.yaml --synthetic --device cpu      # a few minutes on a CPU
  scripts/train.sh --recipe configs/unet3d_kits19_1gpu.yaml --data-dir /data/kits19_npy --resume auto
USAGE
}

ZOO_COMMON="$("${PYTHON}" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
  { echo "error: ${PYTHON} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
# shellcheck source=/dev/null
source "${ZOO_COMMON}/scripts/launch_torch.sh"
launch_torch unet3d.train "$@"
