"""Load Keras Applications' ResNet-50 ImageNet weights (`resnet50_weights_tf_dim_ordering_tf_kernels.h5`).

Those weights are ResNet-50 v1 (stride in the first 1x1 convolution) with biases on the convolutions
and BGR, mean-subtracted ("caffe") input. They load exactly into `resnet50(variant="v1",
input_mode="caffe")`: each convolution bias is folded into the batch norm that follows it
(BN(x + b) with moving mean m equals BN(x) with moving mean m - b). Loaded into our v1.5 model they
are only a starting point for fine-tuning.
"""

from __future__ import annotations

import numpy as np
from zoo.errors import UserError, one_line


def _keras_app_name(ours: str) -> str | None:
    """Our layer name -> the Keras Applications layer name (None: no weights)."""
    if ours.startswith("stem_"):
        return {"stem_conv": "conv1_conv", "stem_bn": "conv1_bn"}.get(ours)
    if ours == "fc":
        return "predictions"
    if not ours.startswith("layer"):
        return None
    stage = int(ours[5])  # "layer2_0_conv1": stage 2, block 0, kind conv1
    block = int(ours.split("_")[1])
    kind = ours.split("_", 2)[2]
    prefix = f"conv{stage + 1}_block{block + 1}"
    table = {
        "conv1": "1_conv", "bn1": "1_bn", "conv2": "2_conv", "bn2": "2_bn", "conv3": "3_conv", "bn3": "3_bn",
        "downsample_conv": "0_conv", "downsample_bn": "0_bn",
    }  # fmt: skip
    return f"{prefix}_{table[kind]}" if kind in table else None


def read_h5_weights(path) -> dict[str, list[np.ndarray]]:
    """{layer name: [arrays in saved order]} from a Keras HDF5 weights or whole-model file."""
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise UserError(f"{path} is not a Keras HDF5 file: {one_line(e)}") from None
    with f:
        group = f["model_weights"] if "model_weights" in f else f
        names = [n.decode() if isinstance(n, bytes) else n for n in group.attrs.get("layer_names", [])]
        if not names:
            raise UserError(f"{path} holds no Keras layer weights")
        out = {}
        for name in names:
            g = group[name]
            weight_names = [
                w.decode() if isinstance(w, bytes) else w for w in g.attrs.get("weight_names", [])
            ]
            out[name] = [np.asarray(g[w]) for w in weight_names]
        return out


def load_keras_applications_h5(model, path) -> None:
    """Copy the .h5 weights into our model (any variant); the classifier only if the class count fits."""
    saved = read_h5_weights(path)
    biases = {}
    loaded = 0
    for layer in model.layers:
        source = _keras_app_name(layer.name)
        if source is None or not layer.weights:
            continue
        if source not in saved:
            raise UserError(f"{path} has no layer {source} (for {layer.name}): not a Keras ResNet-50 file")
        arrays = saved[source]
        if layer.name == "fc" and arrays[0].shape != tuple(layer.kernel.shape):
            print(
                f"classifier not loaded: {path} has {arrays[0].shape[-1]} classes, the model {layer.kernel.shape[-1]}"
            )
            continue
        if source.endswith("_conv"):
            layer.kernel.assign(arrays[0])
            if len(arrays) > 1:  # fold the convolution bias into the next batch norm
                biases[source[: -len("_conv")] + "_bn"] = arrays[1]
        elif source.endswith("_bn"):
            gamma, beta, mean, variance = arrays
            mean = mean - biases.get(source, 0.0)
            for var, value in zip((layer.gamma, layer.beta, layer.moving_mean, layer.moving_variance),
                                  (gamma, beta, mean, variance), strict=True):  # fmt: skip
                var.assign(value)
        else:
            layer.kernel.assign(arrays[0])
            layer.bias.assign(arrays[1])
        loaded += 1
    if loaded < 100:
        raise UserError(f"only {loaded} layers of {path} matched ResNet-50: not a Keras ResNet-50 file")
