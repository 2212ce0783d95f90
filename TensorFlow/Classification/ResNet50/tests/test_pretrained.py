"""Pretrained weights: the registry, a pull from a local HTTP server, Keras Applications' .h5 layout."""

import functools
import http.server
import threading
from pathlib import Path

import numpy as np
import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]


def test_registry_entries_are_complete():
    from zoo.checkpoints import load_registry

    registry = load_registry(MODEL_DIR / "checkpoints.yaml")
    assert registry.names()
    for entry in registry.entries():
        assert entry.url.startswith("https://") and entry.framework == "tensorflow"


def test_keras_applications_weights_load_exactly(tmp_path, policy):
    """A Keras Applications ResNet-50 (random weights, saved as .h5) gives the same outputs in our v1 model."""
    import keras
    from resnet50_tf.keras_applications import load_keras_applications_h5
    from resnet50_tf.model import resnet50

    keras.utils.set_random_seed(1)
    reference = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    for layer in reference.layers:  # non-trivial batch-norm statistics and conv biases
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(np.random.normal(0, 0.1, layer.moving_mean.shape))
            layer.moving_variance.assign(np.random.uniform(0.5, 1.5, layer.moving_variance.shape))
        elif isinstance(layer, keras.layers.Conv2D):
            layer.bias.assign(np.random.normal(0, 0.1, layer.bias.shape))
    path = tmp_path / "resnet50.h5"
    reference.save(path)
    ours = resnet50(10, image_size=64, variant="v1", input_mode="caffe")
    load_keras_applications_h5(ours, path)
    rgb = np.random.uniform(0, 255, (4, 64, 64, 3)).astype(np.float32)
    from resnet50_tf.data import normalize

    expected = reference(keras.applications.resnet50.preprocess_input(rgb.copy()), training=False)
    got = ours(normalize(rgb).numpy(), training=False)
    probs = np.exp(got) / np.exp(got).sum(-1, keepdims=True)  # Keras Applications ends in a softmax
    np.testing.assert_allclose(probs, np.asarray(expected), rtol=1e-3, atol=1e-4)


def test_pull_from_local_server(tmp_path, monkeypatch):
    """scripts/download_checkpoint.sh's module against an http.server on 127.0.0.1: verified, cached."""
    import hashlib

    from resnet50_tf.pretrained import main

    payload = b"weights" * 1000
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "w.h5").write_bytes(payload)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "srv"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/w.h5"
        registry = tmp_path / "checkpoints.yaml"
        good, bad = hashlib.sha256(payload).hexdigest(), "0" * 64
        registry.write_text(
            "checkpoints:\n"
            + "".join(
                f"- {{name: {n}, url: '{url}', sha256: '{h}', size: {len(payload)}, format: keras_h5,"
                " framework: tensorflow, model: resnet50_v1}\n"
                for n, h in (("good", good), ("bad", bad))
            )
        )
        cache = tmp_path / "cache"
        path = main(["good", "--registry", str(registry), "--cache-dir", str(cache)])
        assert Path(path).read_bytes() == payload
        with pytest.raises(SystemExit, match="sha256"):
            main(["bad", "--registry", str(registry), "--cache-dir", str(tmp_path / "cache2")])
        with pytest.raises(SystemExit, match="unknown|known"):
            main(["nope", "--registry", str(registry), "--cache-dir", str(cache)])
    finally:
        server.shutdown()
