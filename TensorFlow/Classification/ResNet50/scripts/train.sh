#!/usr/bin/env bash
# Train ResNet-50 v1.5 (TensorFlow 2 / Keras). One process per node drives every GPU of the node with
# MirroredStrategy; several nodes (TF_CONFIG, or srun with one task per node) use
# MultiWorkerMirroredStrategy. --distribution horovod starts N processes under horovodrun.
#
#   scripts/train.sh --gpus 8 --recipe configs/resnet50_8gpu_90ep.yaml --data-dir /data/tfrecords --amp bf16
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# oneDNN kernels on every x86 CPU (TensorFlow turns them on for recent Intel ones only): ResNet-50's CPU
# training step ran 7x faster with them on an AMD EPYC (2026-11-27); no effect on GPUs.
export TF_ENABLE_ONEDNN_OPTS="${TF_ENABLE_ONEDNN_OPTS:-1}"
PY="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
usage: scripts/train.sh [--gpus N] [options of resnet50_tf.train, below]

  --gpus N   GPUs of this node to train on (default: $NGPU, else every visible GPU): one process
             drives them all (MirroredStrategy); with --distribution horovod, N processes under
             horovodrun, one GPU each
Environment: NGPU (the same as --gpus), DATA_DIR (--data-dir), RESULTS_DIR (--results-dir), PYTHON.

USAGE
}

ZOO_COMMON="$("$PY" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
  { echo "error: ${PY} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
# The launcher sits in common/scripts, beside the installed zoo package.
# shellcheck source=/dev/null
source "${ZOO_COMMON}/scripts/launch_tf.sh"
launch_tf resnet50_tf.train "$@"
