#!/usr/bin/env bash
# Prepare the training data: ImageNet from the tarballs you supply, or the small digits set, or nothing (--synthetic).
set -euo pipefail
MODEL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${MODEL_DIR}${PYTHONPATH:+:${PYTHONPATH}}"
PYTHON="${PYTHON:-python}"

usage() {
  cat <<'USAGE'
Usage:
  scripts/download_data.sh --imagenet TAR_DIR [--data-dir DIR]   lay out ILSVRC2012 as DIR/{train,val}/<wnid>/*.JPEG
  scripts/download_data.sh --digits [--data-dir DIR] [--image-size N]
                                                  build the small digits image folder (10 classes, N px, default 32)
  scripts/download_data.sh --synthetic            nothing to download (train with --data-backend synthetic)
  scripts/download_data.sh --verify [--data-dir DIR]
                                                  decode every image of DIR/{train,val} once and write DIR/manifest.json
                                                  (training decodes the val images the manifest does not vouch for)

--data-dir defaults to $DATA_DIR; it is the folder train.sh and evaluate.sh then read (--data-dir).
ImageNet's licence does not allow redistribution: download ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar
and ILSVRC2012_devkit_t12.tar.gz yourself from https://image-net.org (after accepting the terms) into TAR_DIR.
The tarballs are verified and the validation images are sorted into class folders with the devkit labels.
USAGE
}

ACTION=""
TARS=""
OUT="${DATA_DIR:-}"
SIZE=32
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --synthetic) ACTION=synthetic; shift ;;
    --digits) ACTION=digits; shift ;;
    --verify) ACTION=verify; shift ;;
    --imagenet) ACTION=imagenet; TARS="${2:?--imagenet needs the folder holding the tarballs}"; shift 2 ;;
    --data-dir) OUT="${2:?--data-dir needs a folder}"; shift 2 ;;
    --image-size) SIZE="${2:?--image-size needs a number}"; shift 2 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

case "${ACTION}" in
  synthetic)
    echo "synthetic data needs no download: train with --data-backend synthetic (or --synthetic)"; exit 0 ;;
  digits)
    [[ -n "${OUT}" ]] || { echo "error: give --data-dir DIR (or set DATA_DIR)" >&2; exit 2; }
    exec "${PYTHON}" -c "import sys; from zoo.data.datasets import make_digits_imagefolder as m; print(m(sys.argv[1], image_size=int(sys.argv[2])))" "${OUT}" "${SIZE}" ;;
  imagenet)
    [[ -n "${OUT}" ]] || { echo "error: give --data-dir DIR (or set DATA_DIR)" >&2; exit 2; }
    for f in ILSVRC2012_img_train.tar ILSVRC2012_img_val.tar ILSVRC2012_devkit_t12.tar.gz; do
      [[ -f "${TARS}/${f}" ]] || { echo "error: ${TARS}/${f} not found (download it from https://image-net.org)" >&2; exit 1; }
    done
    exec "${PYTHON}" -m zoo.data.imagenet --train-tar "${TARS}/ILSVRC2012_img_train.tar" \
      --val-tar "${TARS}/ILSVRC2012_img_val.tar" --devkit "${TARS}/ILSVRC2012_devkit_t12.tar.gz" --out-dir "${OUT}" --md5 ;;
  verify)
    [[ -n "${OUT}" ]] || { echo "error: give --data-dir DIR (or set DATA_DIR)" >&2; exit 2; }
    exec "${PYTHON}" -m zoo.imagenet_loaders.verify --data-dir "${OUT}" ;;
  *) usage >&2; exit 1 ;;
esac
