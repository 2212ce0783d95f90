# shellcheck shell=bash
# The launcher every TensorFlow model's scripts/train.sh shares; sourced, not run:
#
#   PY="${PYTHON:-python}"
#   ZOO_COMMON="$("$PY" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
#     { echo "error: ${PY} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
#   source "${ZOO_COMMON}/scripts/launch_tf.sh"
#   launch_tf resnet50_tf.train "$@"
#
# launch_tf MODULE [ARG...] takes --gpus N (--gpus=N; default $NGPU, else every visible GPU) out of ARGs,
# keeps the first N of the visible devices in CUDA_VISIBLE_DEVICES and replaces the shell with
# `$PY -m MODULE ARG...`: one process drives every GPU of the node (MirroredStrategy; several nodes
# through TF_CONFIG or srun with one task per node: MultiWorkerMirroredStrategy). With
# --distribution horovod outside a Horovod job it runs `horovodrun -np N $PY -m MODULE ARG...`
# instead (where Horovod is installed, as in NVIDIA's TensorFlow container).
# -h/--help prints the caller's `usage` function, then `launch_tf_module_help` when the caller defines
# it, else MODULE's own --help.

launch_tf() {
  local module=$1
  shift
  local gpus="${NGPU:-}" horovod=0 previous="" args=() visible
  while (($#)); do
    case "$1" in
      -h|--help)
        if declare -F usage >/dev/null; then usage; fi
        if declare -F launch_tf_module_help >/dev/null; then launch_tf_module_help; exit 0; fi
        exec "$PY" -m "$module" --help ;;
      --gpus) [[ $# -ge 2 ]] || { echo "error: --gpus needs a number" >&2; exit 2; }; gpus="$2"; shift 2; continue ;;
      --gpus=*) gpus="${1#--gpus=}" ;;
      --distribution=horovod) horovod=1; args+=("$1") ;;
      horovod) [[ "$previous" == --distribution ]] && horovod=1; args+=("$1") ;;
      *) args+=("$1") ;;
    esac
    previous="$1"
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
    exec horovodrun -np "${gpus:-1}" "$PY" -m "$module" "${args[@]}"
  fi
  exec "$PY" -m "$module" "${args[@]}"
}
