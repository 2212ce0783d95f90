"""What the image classifiers (ResNet-50, EfficientNet) share beyond their data (zoo.imagenet_loaders):
the training loop (zoo.classification.engine: train_one_epoch, evaluate, the steady-state throughput
clock) and the inference model (zoo.classification.inference: BatchNorm folded, weights cast to the
precision, FP32 in and out) that evaluate.py scores, export.py writes and benchmark.py times, and the
deploy client's side (zoo.classification.client: the images, each one's top-k class names, the report)."""
