#!/usr/bin/env bash
# Train ResNet-50 v1.5 (TensorFlow 2 / Keras). One process per node drives every GPU of the node with
# MirroredStrategy; several nodes (TF_CONFIG, or srun with one task per node) use
# MultiWorkerMirroredStrategy. --distribution horovod starts NGPU processes under horovodrun.
#
#   NGPU=8 scripts/train.sh --config configs/resnet50_8gpu_90ep.yaml --data-dir /data/tfrecords --precision bf16
#
# Environment: NGPU (GPUs of this node to use; default: all visible), PYTHON. Every other option is a
# flag of resnet50_tf.train (--help lists them).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
PY="${PYTHON:-python}"

horovod=0
for arg in "$@"; do
  case "$arg" in
    -h|--help) exec "$PY" -m resnet50_tf.train --help ;;
    horovod|--distribution=horovod) horovod=1 ;;
  esac
done

if [[ -n "${NGPU:-}" && -z "${CUDA_VISIBLE_DEVICES:-}" ]]; then
  [[ "$NGPU" =~ ^[0-9]+$ ]] || { echo "NGPU must be a number, got '$NGPU'" >&2; exit 2; }
  CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((NGPU - 1)))"
  export CUDA_VISIBLE_DEVICES
fi

if [[ "$horovod" == 1 && -z "${HOROVOD_RANK:-}${OMPI_COMM_WORLD_RANK:-}" ]]; then
  command -v horovodrun >/dev/null || { echo "--distribution horovod needs horovodrun (Horovod) installed" >&2; exit 2; }
  exec horovodrun -np "${NGPU:-1}" "$PY" -m resnet50_tf.train "$@"
fi
exec "$PY" -m resnet50_tf.train "$@"
