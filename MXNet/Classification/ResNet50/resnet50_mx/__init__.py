"""ResNet-50 v1.5 in MXNet Gluon: model, RecordIO input, training step and loop, evaluation, export."""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
# What train.py and the benchmark read when no --recipe is given.
DEFAULT_RECIPE = CONFIG_DIR / "resnet50_1gpu_90ep.yaml"
# The choices of --data-backend and --layout, here so that a parser needs no MXNet (resnet50_mx.data, .model).
BACKENDS = ("recordio", "dali-gpu", "dali-cpu", "synthetic")
LAYOUTS = ("NCHW", "NHWC")
# state.json's name in our training checkpoints (zoo.mx.save_training_checkpoint), and how errors call them;
# here so that a run checks a checkpoint's state before importing MXNet (resnet50_mx.checkpoint re-exports them)
CHECKPOINT_KIND = "resnet50_mx"
WHAT = "an MXNet ResNet-50 training checkpoint"
