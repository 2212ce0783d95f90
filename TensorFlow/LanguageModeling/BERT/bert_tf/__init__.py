"""BERT in TensorFlow 2 / Keras: model, Google and PyTorch checkpoints, pretraining, SQuAD, export."""
