#!/usr/bin/env bash
# WMT14 en-de: resumable, verified download of the training corpora and newstest2014, cleaning, joint BPE, binarised shards into --data-dir (default $DATA_DIR); --synthetic writes the generated number-words task instead. Arguments go to transformer.download (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m transformer.download "$@"
