#!/usr/bin/env bash
# A GPU round: every PyTorch model's scripts/benchmark.sh, short, each under its own time limit, from the
# repository root of a GPU machine whose python3 has torch; a summary at the end (logs in $OUT/logs.tgz).
# Wheels in .whl/ (the model requirements the machine lacks) are installed under /tmp/site first.
# usage: bash tests/gpu_round.sh SET
#   a, b: the 1-GPU benchmarks against each model's baseline (each set under 10 minutes on an H100)
#   c, d, e, f: reruns with longer limits or one peer;  s: --gpus 1,2 scaling of five models (needs 2 GPUs)
set -uo pipefail
ROOT=$(pwd)
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "wheel install failed"
fi
export PYTHONPATH=/tmp/site:$ROOT/common PYTHON=python3 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUTD=${OUT:-/tmp/out}; mkdir -p $OUTD/logs
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, torchvision, transformers, timm; print('torch', torch.__version__, 'tv', torchvision.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__)"
SUMMARY=$OUTD/summary.txt; : > $SUMMARY
run() {  # name dir limit args...
  local name=$1 dir=$2 limit=$3; shift 3
  local t0=$(date +%s)
  (cd "$ROOT/$dir" && timeout -k 10 "$limit" bash scripts/benchmark.sh "$@") > $OUTD/logs/$name.log 2>&1
  local rc=$? t1=$(date +%s)
  printf '%-12s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((t1-t0))" "$*" | tee -a $SUMMARY
  grep -v "^\s*$" $OUTD/logs/$name.log | grep -iv "warn" | tail -n 14 | sed "s/^/    [$name] /" | cut -c1-230 | tee -a $SUMMARY
}
SET=${1:-all}
if [[ $SET == a || $SET == all ]]; then
run resnet50 PyTorch/Classification/ResNet50 130 --mode train --models tv-compile,ours --iters 30 --windows 3 --warmup 10
run efficientnet PyTorch/Classification/EfficientNet 120 --mode train --models timm-compile,ours --iters 20 --windows 3 --warmup 10
run bert PyTorch/LanguageModeling/BERT 110 --models ours hf --warmup 5 --iters 20 --windows 3
run ssd PyTorch/Detection/SSD 90 --batch-size 64 --amp bf16 --warmup 3 --iters 12 --windows 3
run retinanet PyTorch/Detection/RetinaNet 80 --amp bf16 --batch-size 16 --warmup 3 --iters 10 --windows 2
fi
if [[ $SET == c ]]; then
run efficientnet PyTorch/Classification/EfficientNet 160 --mode train --models ours --iters 20 --windows 3 --warmup 10
run ssd PyTorch/Detection/SSD 160 --batch-size 64 --amp bf16 --warmup 3 --iters 12 --windows 3
run bert PyTorch/LanguageModeling/BERT 120 --models ours hf --warmup 5 --iters 20 --windows 3
run gpt PyTorch/LanguageModeling/GPT 90 --recipe configs/gpt3_1p3b.yaml --amp bf16 --batch-size 4 --accumulation 1 --steps 20 --warmup 5
fi
if [[ $SET == d ]]; then
run efficientnet PyTorch/Classification/EfficientNet 220 --mode train --models timm-compile,ours --iters 20 --windows 3 --warmup 10
run rnnt PyTorch/SpeechRecognition/RNNT 190 --recipe configs/rnnt_1gpu.yaml --amp bf16 --batch-size 32 --warmup 3 --steps 15 --windows 3
run bert PyTorch/LanguageModeling/BERT 140 --models hf --warmup 5 --iters 20 --windows 3
fi
if [[ $SET == e ]]; then
run rnnt PyTorch/SpeechRecognition/RNNT 150 --recipe configs/rnnt_1gpu.yaml --amp bf16 --batch-size 32 --warmup 3 --steps 15 --windows 3 --peers ours
run retinanet PyTorch/Detection/RetinaNet 60 --amp bf16 --batch-size 16 --warmup 3 --iters 10 --windows 2
run unet3d PyTorch/Segmentation/UNet3D 50 --recipe configs/unet3d_kits19_1gpu.yaml --amp bf16 --warmup 3 --iters 15
run maskrcnn PyTorch/Segmentation/MaskRCNN 70 --mode train --batch-size 8 --image-size 800 --amp bf16 --warmup 5 --iters 15
run gpt PyTorch/LanguageModeling/GPT 80 --recipe configs/gpt3_1p3b.yaml --amp bf16 --batch-size 4 --accumulation 1 --steps 20 --warmup 5
fi
if [[ $SET == f ]]; then  # after a and b on the same warm machine: what they cut at their limits
run ssd PyTorch/Detection/SSD 150 --batch-size 64 --amp bf16 --warmup 3 --iters 12 --windows 3
run dlrm PyTorch/Recommendation/DLRM 90 --recipe configs/dlrm_dcnv2_mlperf_v3.yaml --set model.embeddings=plain --amp bf16 --batch-size 65536 --rows 1000000 --warmup 5 --iters 20 --windows 3
run efficientnet PyTorch/Classification/EfficientNet 150 --mode train --models ours --iters 20 --windows 3 --warmup 10
run bert PyTorch/LanguageModeling/BERT 130 --models hf --warmup 5 --iters 20 --windows 3
fi
if [[ $SET == s ]]; then
W="--window-seconds 10 --windows 1"
run ssd-x2 PyTorch/Detection/SSD 105 --gpus 1,2 --recipe configs/ssd300_coco_8gpu_65ep.yaml $W --warmup 10
run maskrcnn-x2 PyTorch/Segmentation/MaskRCNN 105 --gpus 1,2 --recipe configs/maskrcnn_coco_8gpu.yaml $W --warmup 10
run transformer-x2 PyTorch/Translation/Transformer 105 --gpus 1,2 --recipe configs/transformer_big_wmt14_8gpu.yaml --amp bf16 $W --warmup 10
run dlrm-x2 PyTorch/Recommendation/DLRM 100 --gpus 1,2 --recipe configs/dlrm_dcnv2_mlperf_v3.yaml --amp bf16 --set model.embeddings=plain --set speed.table_kernels=torch $W --warmup 10
run bert-x2 PyTorch/LanguageModeling/BERT 105 --gpus 1,2 --recipe configs/pretrain_phase1_8gpu.yaml --set run.accumulation=8 $W --warmup 3
fi
if [[ $SET == b || $SET == all ]]; then
run maskrcnn PyTorch/Segmentation/MaskRCNN 90 --mode train --batch-size 8 --image-size 800 --amp bf16 --warmup 5 --iters 15
run transformer PyTorch/Translation/Transformer 90 --recipe configs/transformer_big_wmt14.yaml --amp bf16 --batch-size 64 --seq-len 64 --no-marian --warmup 5 --iters 20 --windows 3
run dlrm PyTorch/Recommendation/DLRM 70 --recipe configs/dlrm_dcnv2_mlperf_v3.yaml --set model.embeddings=plain --amp bf16 --batch-size 65536 --rows 1000000 --warmup 5 --iters 20 --windows 3
run gpt PyTorch/LanguageModeling/GPT 90 --recipe configs/gpt3_1p3b.yaml --amp bf16 --batch-size 4 --accumulation 1 --steps 20 --warmup 5
run rnnt PyTorch/SpeechRecognition/RNNT 80 --recipe configs/rnnt_1gpu.yaml --amp bf16 --batch-size 32 --warmup 3 --steps 15 --windows 3
run unet3d PyTorch/Segmentation/UNet3D 70 --recipe configs/unet3d_kits19_1gpu.yaml --amp bf16 --warmup 3 --iters 15
fi
tar czf $OUTD/logs.tgz -C $OUTD logs && rm -rf $OUTD/logs
echo "===== SUMMARY"; grep -E "^[a-z0-9]+ +rc=" $SUMMARY
