"""Model-family data, framework-neutral (numpy): what two or more models read, prepared once.

- ``zoo.data.bert``: BERT pretraining samples (sequences, packing, masking), the shard reader, Google's
  BERT TF zip; ``zoo.data.bert_prepare``: text into shards, ``python -m zoo.data.bert_prepare``
- ``zoo.data.text``: raw text and Wikipedia extraction; ``zoo.data.wordpiece``: the WordPiece tokenizer
- ``zoo.data.squad``: SQuAD v1.1 features, span decoding, the official EM/F1, the Triton span client
- ``zoo.data.coco``: COCO 2017 download, size/MD5 check and layout
- ``zoo.data.imagenet``: ImageNet layout from the official tarballs and devkit
- ``zoo.data.datasets``: small real datasets for tests and demos (scikit-learn's digits)
"""
