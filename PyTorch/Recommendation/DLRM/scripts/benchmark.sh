#!/usr/bin/env bash
# DLRM: training samples/s of ours and of an eager PyTorch DLRM (EmbeddingBag per table) on the same synthetic batches (JSON). Arguments go to dlrm.benchmark (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m dlrm.benchmark "$@"
