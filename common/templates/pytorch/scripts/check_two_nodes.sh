#!/usr/bin/env bash
# Two nodes train as one: this model's train.sh launched as one node of 2N processes and as two nodes of N
# on this host, losses compared step for step (the zoo's shared check, common/scripts/check_two_nodes.sh).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"
ZOO_COMMON="$("${PYTHON}" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
  { echo "error: ${PYTHON} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
exec bash "${ZOO_COMMON}/scripts/check_two_nodes.sh" "${MODEL_DIR}/scripts/train.sh" "$@"
