#!/usr/bin/env bash
# RNN-T: LibriSpeech from openslr.org (resumed, MD5-checked, extracted), manifests and the SentencePiece model into --data-dir; --synthetic speaks a small digit set with espeak-ng instead. Arguments go to rnnt.download (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}:${PYTHONPATH:-}"
exec "${PYTHON:-python}" -m rnnt.download "$@"
