#!/usr/bin/env bash
# The whole user path on a CPU in a few minutes: data -> train -> evaluate -> export -> Triton -> classify.
# The real ResNet-50 v1.5 (23.5M parameters for 10 classes) learns scikit-learn's handwritten digits
# (1,797 real 8x8 images, upscaled to 32x32 RGB), then the real tritonserver serves it.
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  cat <<'USAGE'
Usage: scripts/demo.sh            (run by `make demo`)
Environment: DEMO_DIR (default ./data/resnet50-demo), DEMO_EPOCHS (default 8), DEMO_THREADS (default 2),
             DEMO_IMAGE_SIZE (default 32), PYTHON.
Builds the digits image folder, trains ResNet-50 v1.5 on the CPU, evaluates it, exports it to a Triton
model repository, starts tritonserver on 127.0.0.1, classifies held-out images through tritonclient and
prints the predictions and the served latency; draws the run's curves to DEMO_DIR/curves.png.
USAGE
  exit 0
fi

DEMO_DIR="${DEMO_DIR:-${PWD}/data/resnet50-demo}"
EPOCHS="${DEMO_EPOCHS:-8}"
THREADS="${DEMO_THREADS:-2}"
SIZE="${DEMO_IMAGE_SIZE:-32}"
DATA="${DEMO_DIR}/digits${SIZE}"
RESULTS="${DEMO_DIR}/results"
REPO="${DEMO_DIR}/triton_repo"
export OMP_NUM_THREADS="${THREADS}"
START=$(date +%s)
step() { echo; echo "== [$(( $(date +%s) - START ))s] $*"; }

step "1/6 data: scikit-learn digits as a ${SIZE}x${SIZE} image folder in ${DATA}"
"${PYTHON}" -c "import sys; from zoo.data.datasets import make_digits_imagefolder as m; m(sys.argv[1], image_size=int(sys.argv[2]))" "${DATA}" "${SIZE}"
echo "train: $(find "${DATA}/train" -name '*.jpg' | wc -l) images, val: $(find "${DATA}/val" -name '*.jpg' | wc -l) images, 10 classes"

step "2/6 train ResNet-50 v1.5 on the CPU (${EPOCHS} epochs, ${THREADS} threads)"
rm -rf "${RESULTS}"  # a fresh run each time (its metrics.jsonl would otherwise grow)
"${PYTHON}" -m resnet50.train --recipe "${MODEL_DIR}/configs/digits_cpu.yaml" --data-dir "${DATA}" \
  --results-dir "${RESULTS}" --epochs "${EPOCHS}" --image-size "${SIZE}" --threads "${THREADS}" --log-every 10

step "3/6 evaluate the checkpoint on the held-out images (chance is 10%)"
"${PYTHON}" -m resnet50.evaluate --checkpoint "${RESULTS}/checkpoint.pt" --data-dir "${DATA}" --num-classes 10 \
  --image-size "${SIZE}" --batch-size 64 --workers 1 --device cpu --amp fp32 --results-dir "${RESULTS}"

step "4/6 export TorchScript + ONNX into the Triton model repository ${REPO}"
"${PYTHON}" -m resnet50.export --checkpoint "${RESULTS}/checkpoint.pt" --repository "${REPO}" --num-classes 10 \
  --image-size "${SIZE}" --instance-kind KIND_CPU --max-batch-size 16 --force  # replaces an earlier demo's models

step "5/6 serve with tritonserver (python backend running the ONNX model) and classify held-out images"
HELD_OUT="${DEMO_DIR}/held_out"
rm -rf "${HELD_OUT}"
for class_dir in "${DATA}"/val/*/; do
  mkdir -p "${HELD_OUT}/$(basename "${class_dir}")"
  find "${class_dir}" -name '*.jpg' | sort | head -n 2 | xargs -I{} cp {} "${HELD_OUT}/$(basename "${class_dir}")/"
done
"${PYTHON}" -m resnet50.deploy --repository "${REPO}" --model resnet50_python --protocol grpc \
  --image-size "${SIZE}" --top-k 2 --server-log "${DEMO_DIR}/tritonserver.log" "${HELD_OUT}"

step "6/6 curves: loss, top-1 and throughput of the run (metrics.jsonl) drawn as a PNG"
"${PYTHON}" -m zoo.plot "${RESULTS}" --output "${DEMO_DIR}/curves.png"
echo "TensorBoard: tensorboard --logdir ${RESULTS}/tensorboard"

step "done in $(( $(date +%s) - START )) s: checkpoint ${RESULTS}/checkpoint.pt, metrics ${RESULTS}/metrics.jsonl, repository ${REPO}"
