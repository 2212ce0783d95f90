#!/usr/bin/env bash
# RNN-T: transcribe WAV or FLAC files with model.pt, one line per file. Arguments go to rnnt.transcribe (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m rnnt.transcribe "$@"
