"""BERT pretraining (phase 1/2, sequence packing, LAMB) and SQuAD v1.1 fine-tuning in PyTorch."""
