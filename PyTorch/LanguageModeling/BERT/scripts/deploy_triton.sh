#!/usr/bin/env bash
# Serve the repository with tritonserver and answer questions through tritonclient (HTTP or gRPC).
#   scripts/deploy_triton.sh --model-repository results/triton_repository \
#       --question "Who may copy it?" --context "Everyone is permitted to copy ..."
#   scripts/deploy_triton.sh --url 127.0.0.1:8000 --model bert_squad_onnx --squad-file dev-v1.1.json
#   scripts/deploy_triton.sh --squad-file dev-v1.1.json --limit 64 --concurrency 1,4,16 --requests 256   # load
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
exec "${PYTHON:-python}" -m bert.deploy "$@"
