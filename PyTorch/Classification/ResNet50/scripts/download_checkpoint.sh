#!/usr/bin/env bash
# Pull a pretrained checkpoint by name from checkpoints.yaml into the zoo cache (verified, resumable).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
if [[ $# -eq 0 || "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  echo "Usage: scripts/download_checkpoint.sh NAME [--cache-dir DIR] [--registry FILE]"
  echo "       scripts/download_checkpoint.sh --list"
  echo "The file lands in \$ZOO_CACHE (default ~/.cache/zoo/checkpoints); its path is printed."
  echo
  "${PYTHON}" -m resnet50.checkpoints list
  [[ $# -eq 0 ]] && exit 1
  exit 0
fi
if [[ "$1" == "--list" ]]; then
  exec "${PYTHON}" -m resnet50.checkpoints list
fi
NAME="$1"; shift
REGISTRY=()
REST=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --registry) REGISTRY=(--registry "$2"); shift 2 ;;
    *) REST+=("$1"); shift ;;
  esac
done
exec "${PYTHON}" -m resnet50.checkpoints "${REGISTRY[@]}" pull "${NAME}" "${REST[@]}"
