# shellcheck shell=bash
# The launcher every PyTorch model's scripts/train.sh shares; sourced, not run:
#
#   PY="${PYTHON:-python}"
#   ZOO_COMMON="$("$PY" -c 'import pathlib, zoo; print(pathlib.Path(zoo.__file__).parents[1])' 2>/dev/null)" ||
#     { echo "error: ${PY} cannot import zoo: pip install -e common (the zoo images have it)" >&2; exit 1; }
#   source "${ZOO_COMMON}/scripts/launch_torch.sh"
#   launch_torch ssd.train "$@"
#
# (zoo is installed editable, from common/ in a checkout and from /opt/zoo/common in the images, so the
# launcher is found in both without a path above the model directory.)
#
# launch_torch MODULE [ARG...] takes the launcher's options out of ARGs and replaces the shell with
# `$PY -m MODULE ARG...`: one process, or torchrun (torch.distributed.run, c10d rendezvous) when more
# than one process per node or more than one node is asked for. Options, each with its environment
# variable as default:
#   --gpus N (--gpus=N)          NGPU           processes (GPUs) on this node (default 1)
#   --nnodes N                   NNODES         nodes taking part (default 1)
#   --node-rank R                NODE_RANK      this node's rank (default 0)
#   --rdzv-endpoint HOST:PORT    RDZV_ENDPOINT  node 0's rendezvous address (default 127.0.0.1:29500)
# Under torchrun each process gets OMP_NUM_THREADS = the node's cores / N unless the caller set it.
# LAUNCH_TORCH_DEFAULT_GPUS=visible (set by the caller) makes the default every visible GPU (1 on a CPU).
# Under SLURM, srun with one task per GPU needs none of them: zoo.dist reads the ranks from SLURM_*.
# -h/--help prints the caller's `usage` function (when it defines one, else a generic usage line),
# the options above and MODULE's own --help.

launch_torch_options() {
  cat <<'OPTIONS'
launcher options (torchrun when N > 1 or several nodes):
  --gpus N                   processes (GPUs) on this node; default $NGPU, else 1
  --nnodes N                 nodes taking part; default $NNODES, else 1
  --node-rank R              this node's rank; default $NODE_RANK, else 0
  --rdzv-endpoint HOST:PORT  node 0's address; default $RDZV_ENDPOINT, else 127.0.0.1:29500
  env: NGPU, NNODES, NODE_RANK, RDZV_ENDPOINT, DATA_DIR, RESULTS_DIR, PYTHON
OPTIONS
}

# launch_torch_require_number NAME VALUE MIN: exit 2 with one line unless VALUE is a whole number >= MIN.
launch_torch_require_number() {
  if ! [[ "$2" =~ ^[0-9]+$ ]] || (( 10#$2 < $3 )); then
    echo "error: $1 must be a whole number >= $3, got '$2'" >&2
    exit 2
  fi
}

# launch_torch_visible_gpus: the GPUs this process may use, at least 1, without importing torch (three
# seconds on a CPU): CUDA_VISIBLE_DEVICES's entries up to the first negative one when it is set, else the
# GPUs that nvidia-smi lists.
launch_torch_visible_gpus() {
  local count=0 id ids
  if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
    IFS=, read -ra ids <<< "${CUDA_VISIBLE_DEVICES}"
    for id in "${ids[@]}"; do
      [[ "${id}" == -* ]] && break
      count=$((count + 1))
    done
  elif command -v nvidia-smi >/dev/null 2>&1; then
    count="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
  fi
  echo $(( count > 1 ? count : 1 ))
}

launch_torch() {
  local module="$1"
  shift
  local py="${PYTHON:-python}"
  local gpus="${NGPU:-${LAUNCH_TORCH_DEFAULT_GPUS:-1}}"
  local nnodes="${NNODES:-1}" node_rank="${NODE_RANK:-0}" endpoint="${RDZV_ENDPOINT:-127.0.0.1:29500}"
  local args=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -h|--help)
        if declare -F usage >/dev/null; then
          usage
        else
          echo "usage: train.sh [--gpus N] [--nnodes N --node-rank R --rdzv-endpoint HOST:PORT] [${module} options]"
          launch_torch_options
        fi
        echo
        exec "$py" -m "$module" --help ;;
      --gpus|--nnodes|--node-rank|--rdzv-endpoint)
        if [[ $# -lt 2 ]]; then
          echo "error: $1 needs a value" >&2
          exit 2
        fi
        case "$1" in
          --gpus) gpus="$2" ;;
          --nnodes) nnodes="$2" ;;
          --node-rank) node_rank="$2" ;;
          --rdzv-endpoint) endpoint="$2" ;;
        esac
        shift 2 ;;
      --gpus=*) gpus="${1#--gpus=}"; shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
  if [[ "$gpus" == visible ]]; then
    gpus="$(launch_torch_visible_gpus)"
  fi
  launch_torch_require_number "--gpus/NGPU" "$gpus" 1
  launch_torch_require_number "--nnodes/NNODES" "$nnodes" 1
  launch_torch_require_number "--node-rank/NODE_RANK" "$node_rank" 0
  if (( 10#$gpus > 1 || 10#$nnodes > 1 )); then
    # torchrun gives every process one CPU thread unless OMP_NUM_THREADS is set: input pipelines doing
    # CPU work (box matching, target generation, collation) then run on one core. Share the node's cores.
    if [[ -z "${OMP_NUM_THREADS:-}" ]]; then
      local cores
      cores="$(nproc 2>/dev/null || echo 1)"
      export OMP_NUM_THREADS=$(( cores / 10#$gpus > 1 ? cores / 10#$gpus : 1 ))
    fi
    exec "$py" -m torch.distributed.run --nproc_per_node "$gpus" --nnodes "$nnodes" \
      --node_rank "$node_rank" --rdzv_backend c10d --rdzv_endpoint "$endpoint" \
      -m "$module" "${args[@]}"
  fi
  exec "$py" -m "$module" "${args[@]}"
}
