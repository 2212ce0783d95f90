"""Pretrained weights: the registry, a pull from a local HTTP server, Keras Applications' .h5 layout."""

import functools
import http.server
import threading
from pathlib import Path

import numpy as np
import pytest
from zoo.errors import UserError

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


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on 127.0.0.1; yields (folder, base URL)."""
    folder = tmp_path / "srv"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_registry_name_is_pulled_and_evaluated_with_its_preprocessing(
    served, tmp_path, monkeypatch, capsys, policy
):
    """evaluate.sh --checkpoint NAME: pulled from a server on 127.0.0.1, scored with the entry's preprocessing."""
    import keras
    from resnet50_tf import checkpoint, evaluate

    folder, url = served
    keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=1000).save(folder / "w.h5")
    (folder / "login.h5").write_text("<!DOCTYPE html><html><body>Please sign in</body></html>")
    whole = (folder / "w.h5").read_bytes()
    (folder / "cut.h5").write_bytes(whole[: len(whole) // 2])  # what a server holding half a file sends
    registry = tmp_path / "checkpoints.yaml"
    pre = "{resize: 36, crop: 32, interpolation: bicubic, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}"
    registry.write_text(
        "checkpoints:\n"
        + "".join(
            f"- {{name: {name}, url: '{url}/{file}', sha256: null, size: null, format: hdf5,"
            f" framework: tensorflow, model: resnet50_v1, preprocessing: {pre}}}\n"
            for name, file in (("good", "w.h5"), ("login", "login.h5"), ("cut", "cut.h5"))
        )
    )
    monkeypatch.setattr(checkpoint, "REGISTRY", registry)
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    metrics = evaluate.main(["--checkpoint", "good", "--synthetic", "--batch-size", "2"])
    assert metrics["synthetic"] and metrics["samples"] == 4
    assert "preprocessing: resize 36, crop 32, bicubic, mean (0.485, 0.456, 0.406)" in capsys.readouterr().err
    assert (tmp_path / "cache" / "good" / "w.h5").read_bytes() == (folder / "w.h5").read_bytes()
    with pytest.raises(UserError, match="not an HDF5 file but an HTML page"):
        checkpoint.resolve_checkpoint("login")
    assert not (tmp_path / "cache" / "login").exists() or not any((tmp_path / "cache" / "login").iterdir())
    with pytest.raises(UserError, match=f"{len(whole) // 2} bytes, shorter than the {len(whole)} its HDF5"):
        checkpoint.resolve_checkpoint("cut")
    assert not (tmp_path / "cache" / "cut").exists() or not any((tmp_path / "cache" / "cut").iterdir())
    with pytest.raises(UserError, match="unknown checkpoint 'nope'"):
        checkpoint.resolve_checkpoint("nope")


def test_eval_image_uses_the_entry_resize():
    """A V2-style entry (resize 232, crop 224) resizes the short side to 232, where ours use 256."""
    import tensorflow as tf
    from resnet50_tf.data import eval_image
    from zoo.checkpoints import Preprocessing

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    pixels = tf.constant(np.random.default_rng(0).integers(0, 256, (300, 400, 3)), tf.uint8)
    encoded = tf.io.encode_jpeg(pixels, quality=100)
    got = eval_image(encoded, 224, Preprocessing(232, 224, "bilinear", mean, std)).numpy()
    decoded = tf.io.decode_jpeg(encoded, channels=3)
    resized = tf.image.resize(decoded, [232, 309], method="bilinear", antialias=True)[4:228, 42:266, :]
    expected = (resized.numpy() - 255 * np.array(mean)) / (255 * np.array(std))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    assert not np.allclose(got, eval_image(encoded, 224).numpy(), atol=1e-2)  # ours: resize 256
