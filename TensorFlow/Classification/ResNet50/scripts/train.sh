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

gpus="${NGPU:-}"
horovod=0
args=()
while (($#)); do
  case "$1" in
    -h|--help) usage; exec "$PY" -m resnet50_tf.train --help ;;
    --gpus) [[ $# -ge 2 ]] || { echo "error: --gpus needs a number" >&2; exit 2; }; gpus="$2"; shift 2; continue ;;
    --gpus=*) gpus="${1#--gpus=}" ;;
    --distribution=horovod) horovod=1; args+=("$1") ;;
    horovod) horovod=1; args+=("$1") ;;
    *) args+=("$1") ;;
  esac
  shift
done

if [[ -n "$gpus" ]]; then
  [[ "$gpus" =~ ^[1-9][0-9]*$ ]] || { echo "error: --gpus/NGPU must be a number >= 1, got '$gpus'" >&2; exit 2; }
  if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then  # keep the devices the job was given: the first N of them
    IFS=, read -ra visible <<< "$CUDA_VISIBLE_DEVICES"
    ((gpus <= ${#visible[@]})) || { echo "error: --gpus $gpus but CUDA_VISIBLE_DEVICES has ${#visible[@]}" >&2; exit 2; }
    CUDA_VISIBLE_DEVICES="$(IFS=,; echo "${visible[*]:0:gpus}")"
  else
    CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((gpus - 1)))"
  fi
  export CUDA_VISIBLE_DEVICES
fi

if [[ "$horovod" == 1 && -z "${HOROVOD_RANK:-}${OMPI_COMM_WORLD_RANK:-}" ]]; then
  command -v horovodrun >/dev/null || { echo "error: --distribution horovod needs horovodrun (Horovod) installed" >&2; exit 2; }
  exec horovodrun -np "${gpus:-1}" "$PY" -m resnet50_tf.train "${args[@]}"
fi
exec "$PY" -m resnet50_tf.train "${args[@]}"
