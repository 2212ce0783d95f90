"""Transformer (big/base) for WMT14 English-German: model, data, training, evaluation, export."""
