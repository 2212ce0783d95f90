#!/usr/bin/env bash
# Prepare the training data: ImageNet from the tarballs you supply, or the small digits set, or nothing (--synthetic).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
Usage:
  scripts/download_data.sh --imagenet TAR_DIR OUT_DIR   lay out ILSVRC2012 as OUT_DIR/{train,val}/<wnid>/*.JPEG
  scripts/download_data.sh --digits OUT_DIR [SIZE]      build the small digits image folder (10 classes, SIZE px, default 32)
  scripts/download_data.sh --synthetic                  nothing to download (train with --data-backend synthetic)

ImageNet's licence does not allow redistribution: download ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar
and ILSVRC2012_devkit_t12.tar.gz yourself from https://image-net.org (after accepting the terms) into TAR_DIR.
The tarballs are verified and the validation images are sorted into class folders with the devkit labels.
USAGE
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --synthetic)
    echo "synthetic data needs no download: train with --data-backend synthetic (or --synthetic)"; exit 0 ;;
  --digits)
    OUT="${2:?--digits needs an output folder}"; SIZE="${3:-32}"
    exec "${PYTHON}" -c "import sys; from zoo.datasets import make_digits_imagefolder as m; print(m(sys.argv[1], image_size=int(sys.argv[2])))" "${OUT}" "${SIZE}" ;;
  --imagenet)
    TARS="${2:?--imagenet needs the folder holding the tarballs}"; OUT="${3:?--imagenet needs an output folder}"
    for f in ILSVRC2012_img_train.tar ILSVRC2012_img_val.tar ILSVRC2012_devkit_t12.tar.gz; do
      [[ -f "${TARS}/${f}" ]] || { echo "error: ${TARS}/${f} not found (download it from https://image-net.org)" >&2; exit 1; }
    done
    exec "${PYTHON}" -m zoo.imagenet --train-tar "${TARS}/ILSVRC2012_img_train.tar" \
      --val-tar "${TARS}/ILSVRC2012_img_val.tar" --devkit "${TARS}/ILSVRC2012_devkit_t12.tar.gz" --out-dir "${OUT}" --md5 ;;
  *) usage >&2; exit 1 ;;
esac
