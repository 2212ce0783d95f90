"""Export parity (SavedModel and ONNX against Keras), config.pbtxt validity, the real tritonserver, and
the deploy script stopping its server however it ends."""

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def exported(trained_run, digits_tfrecords, tmp_path_factory):
    from resnet50_tf.checkpoint import load_model_from_run
    from resnet50_tf.deploy import load_validation
    from resnet50_tf.export import main

    run, _ = trained_run
    repo = tmp_path_factory.mktemp("repo")
    main(["--checkpoint", str(run), "--model-repository", str(repo), "--max-batch-size", "16"])
    model, _ = load_model_from_run(run)
    images, labels, _ = load_validation(str(digits_tfrecords), 32, 48)
    keras_logits = model.predict(images, verbose=0)
    return repo, images, labels, keras_logits


def test_repository_configs_are_valid(exported):
    from zoo.triton.repository import parse_pbtxt

    repo = exported[0]
    names = sorted(p.parent.name for p in repo.glob("*/config.pbtxt"))
    assert names == ["resnet50_tf_onnx", "resnet50_tf_python", "resnet50_tf_savedmodel"]
    for path in repo.glob("*/config.pbtxt"):
        config = parse_pbtxt(path.read_text())
        assert config.input[0].name == "images" and config.output[0].name == "logits"
        assert list(config.input[0].dims) == [3, 32, 32] and list(config.output[0].dims) == [10]
        assert (path.parent / "labels.txt").read_text().split() == [str(i) for i in range(10)]
    assert (
        parse_pbtxt((repo / "resnet50_tf_savedmodel/config.pbtxt").read_text()).platform
        == "tensorflow_savedmodel"
    )


def test_savedmodel_equals_keras(exported):
    import tensorflow as tf
    from resnet50_tf.deploy import to_nchw

    repo, images, _, keras_logits = exported
    loaded = tf.saved_model.load(str(repo / "resnet50_tf_savedmodel/1/model.savedmodel"))
    out = loaded.signatures["serving_default"](images=tf.constant(to_nchw(images)))["logits"].numpy()
    np.testing.assert_allclose(out, keras_logits, rtol=1e-4, atol=1e-4)


def test_onnx_equals_keras(exported):
    import onnxruntime as ort
    from resnet50_tf.deploy import to_nchw

    repo, images, _, keras_logits = exported
    session = ort.InferenceSession(
        str(repo / "resnet50_tf_onnx/1/model.onnx"), providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_inputs()] == ["images"]
    assert session.get_inputs()[0].shape[0] in (None, "unk__0") or isinstance(
        session.get_inputs()[0].shape[0], str
    )
    for batch in (1, 7):  # dynamic batch
        out = session.run(["logits"], {"images": to_nchw(images[:batch])})[0]
        np.testing.assert_allclose(out, keras_logits[:batch], rtol=1e-3, atol=1e-3)


def test_tritonserver_python_backend_top1_equals_keras(exported, tmp_path):
    """The real tritonserver (nvidia-pytriton wheel) on 127.0.0.1 serves the python-backend model."""
    from resnet50_tf.deploy import classify, to_nchw
    from zoo.triton.server import TritonServer

    repo, images, _, keras_logits = exported
    only = tmp_path / "repo"  # the wheel's server has only the python backend
    only.mkdir()
    (only / "resnet50_tf_python").symlink_to(repo / "resnet50_tf_python", target_is_directory=True)
    with TritonServer(only) as server:
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            logits, latencies = classify(url, "resnet50_tf_python", to_nchw(images), protocol, batch_size=8)
            assert len(latencies) == 6
            np.testing.assert_array_equal(logits.argmax(-1), keras_logits.argmax(-1), err_msg=protocol)
            np.testing.assert_allclose(logits, keras_logits, rtol=1e-3, atol=1e-3, err_msg=protocol)


def test_deploy_script_reports_top1(exported, digits_tfrecords):
    from resnet50_tf.deploy import main

    repo, _, labels, keras_logits = exported
    result = main(["--model-repository", str(repo), "--data-dir", str(digits_tfrecords), "--count", "48"])
    assert result["images"] == 48
    assert result["top1"] == pytest.approx(100 * np.mean(keras_logits.argmax(-1) == labels))


def test_deploy_load_mode_counts_requests_without_errors(exported, digits_tfrecords, capsys):
    from resnet50_tf.deploy import main

    repo = exported[0]
    args = ["--model-repository", str(repo), "--data-dir", str(digits_tfrecords), "--count", "16"]
    result = main([*args, "--batch-size", "4", "--concurrency", "1,2", "--requests", "6"])
    rows = result["load"]
    assert [(r["concurrency"], r["requests"], r["errors"]) for r in rows] == [(1, 6, 0), (2, 6, 0)]
    assert all(r["throughput"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] for r in rows)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].split()[:3] == ["concurrency", "requests", "errors"]
    assert [line.split()[:3] for line in lines[-2:]] == [["1", "6", "0"], ["2", "6", "0"]]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_deploy_stops_tritonserver_and_its_stubs_on_a_signal(exported, sig):
    from zoo.triton.processes import signal_when_serving

    command = [sys.executable, "-m", "resnet50_tf.deploy", "--model-repository", str(exported[0])]
    command += ["--synthetic", "--count", "3000", "--batch-size", "1"]
    env = {**os.environ, "PYTHONPATH": str(MODEL_DIR)}
    run = signal_when_serving(command, sig, ready_text="tritonserver ready", env=env)
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output
    assert run.returncode != 0 and "latency p50" not in run.output, "the signal came after the deploy ended"
