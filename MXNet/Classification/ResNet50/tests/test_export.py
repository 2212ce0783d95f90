"""ONNX export parity with Gluon (onnxruntime), the python-backend model served by the real tritonserver,
and the deploy script stopping its server however it ends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import mxnet as mx
import numpy as np
import pytest
from resnet50_mx.checkpoint import load_for_inference
from resnet50_mx.deploy import classify, load_images, serve
from resnet50_mx.triton_repo import zoo_triton_python

MODEL_DIR = Path(__file__).resolve().parents[1]
SERVER_PYTHON = Path(zoo_triton_python() or "/nonexistent")


@pytest.fixture(scope="module")
def gluon_reference(trained, digits_rec):
    """32 validation images and the logits of the trained Gluon network on them."""
    images, labels = load_images(str(digits_rec), 32, 32)
    net, _ = load_for_inference(str(trained))
    logits = net(mx.nd.array(images)).asnumpy()
    return images, labels, logits


def test_repository_layout_and_configs(triton_repository):
    for name in ("resnet50_mx_onnx", "resnet50_mx_python"):
        assert (triton_repository / name / "config.pbtxt").is_file()
        assert (triton_repository / name / "1" / "model.onnx").is_file()
    onnx_config = (triton_repository / "resnet50_mx_onnx" / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in onnx_config and "max_batch_size: 16" in onnx_config
    assert 'backend: "python"' in (triton_repository / "resnet50_mx_python" / "config.pbtxt").read_text()
    for name in ("resnet50_mx_onnx", "resnet50_mx_python"):  # the digits' class folders, Triton's labels
        assert (triton_repository / name / "labels.txt").read_text().split() == list("0123456789")
        assert 'label_filename: "labels.txt"' in (triton_repository / name / "config.pbtxt").read_text()


@pytest.mark.skipif(not SERVER_PYTHON.is_file(), reason="zoo.triton's ModelConfig check needs .venv/pytorch")
def test_configs_parse_as_model_config(triton_repository):
    proc = subprocess.run(
        [str(SERVER_PYTHON), "-m", "zoo.triton", "validate", str(triton_repository)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 config.pbtxt" in proc.stdout


def test_onnx_matches_gluon(triton_repository, gluon_reference):
    import onnxruntime as ort

    images, _, logits = gluon_reference
    session = ort.InferenceSession(
        str(triton_repository / "resnet50_mx_onnx" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_inputs()] == ["images"]
    assert [o.name for o in session.get_outputs()] == ["logits"]
    for batch in (images[:1], images):  # dynamic batch
        out = session.run(["logits"], {"images": batch})[0]
        np.testing.assert_allclose(out, logits[: len(batch)], rtol=1e-3, atol=1e-4)
    assert np.array_equal(out.argmax(1), logits.argmax(1))


@pytest.mark.skipif(
    not SERVER_PYTHON.is_file(), reason="tritonserver comes from nvidia-pytriton in .venv/pytorch"
)
def test_triton_python_backend_gives_gluon_top1(
    triton_repository, gluon_reference, digits_rec, tmp_path, capsys
):
    from resnet50_mx.deploy import main

    images, labels, logits = gluon_reference
    words = "zero one two three four five six seven eight nine".split()
    (tmp_path / "words.txt").write_text("\n".join(words) + "\n")
    args = ["--model-repository", str(triton_repository), "--data-dir", str(digits_rec), "--num-images", "4"]
    with serve(triton_repository, models=["resnet50_mx_python"]) as url:
        served, latencies = classify(url, "resnet50_mx_python", images, batch_size=8)
        capsys.readouterr()
        main([*args, "--url", url])  # the names of the export's labels.txt: the digits' folders
        main([*args, "--url", url, "--labels", str(tmp_path / "words.txt")])
    assert len(latencies) == 4
    np.testing.assert_allclose(served, logits, rtol=1e-3, atol=1e-4)
    assert np.array_equal(served.argmax(1), logits.argmax(1))
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("image ")]
    top1 = logits.argmax(1)
    assert printed == [f"image {i}: predicted {top1[i]} (label {labels[i]})" for i in range(4)] + [
        f"image {i}: predicted {words[top1[i]]} (label {words[labels[i]]})" for i in range(4)
    ]


@pytest.mark.skipif(
    not SERVER_PYTHON.is_file(), reason="tritonserver comes from nvidia-pytriton in .venv/pytorch"
)
def test_deploy_load_mode_counts_requests_without_errors(triton_repository, digits_rec, capsys):
    from resnet50_mx.deploy import main

    args = ["--model-repository", str(triton_repository), "--data-dir", str(digits_rec)]
    result = main(
        [*args, "--num-images", "16", "--batch-size", "4", "--concurrency", "1,2", "--requests", "6"]
    )
    rows = result["load"]
    assert [(r["concurrency"], r["requests"], r["errors"]) for r in rows] == [(1, 6, 0), (2, 6, 0)]
    assert all(r["throughput"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] for r in rows)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].split()[:3] == ["concurrency", "requests", "errors"]
    assert [line.split()[:3] for line in lines[-2:]] == [["1", "6", "0"], ["2", "6", "0"]]


@pytest.mark.skipif(
    not SERVER_PYTHON.is_file(), reason="tritonserver comes from nvidia-pytriton in .venv/pytorch"
)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_deploy_stops_tritonserver_and_its_stubs_on_a_signal(triton_repository, digits_rec, sig):
    from zoo.triton.processes import signal_when_serving

    command = [sys.executable, "-m", "resnet50_mx.deploy", "--model-repository", str(triton_repository)]
    command += ["--data-dir", str(digits_rec), "--num-images", "359", "--batch-size", "1"]
    env = {**os.environ, "PYTHONPATH": str(MODEL_DIR)}
    run = signal_when_serving(command, sig, ready_text="tritonserver ready", env=env)
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output
    assert run.returncode != 0 and '"top1"' not in run.output, "the signal came after the deploy ended"


@pytest.mark.skipif(
    not SERVER_PYTHON.is_file(), reason="tritonserver comes from nvidia-pytriton in .venv/pytorch"
)
def test_deploy_names_why_the_model_did_not_load(triton_repository, digits_rec, tmp_path):
    broken = tmp_path / "repo"
    shutil.copytree(triton_repository / "resnet50_mx_python", broken / "resnet50_mx_python")
    (broken / "resnet50_mx_python" / "1" / "model.onnx").write_bytes(b"not an onnx file")
    command = [sys.executable, "-m", "resnet50_mx.deploy", "--model-repository", str(broken)]
    command += ["--data-dir", str(digits_rec), "--num-images", "8"]
    proc = subprocess.run(
        command, env={**os.environ, "PYTHONPATH": str(MODEL_DIR)}, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "error: tritonserver exited with code 1 while starting: model 'resnet50_mx_python'"
    )
    assert "UNAVAILABLE" in last and "Protobuf parsing failed" in last, last


def test_package_imports_where_the_dockerfile_puts_it():
    """/workspace/resnet50 in the image: two levels below /, no repository around it."""
    shallow = Path(tempfile.mkdtemp(dir="/tmp"))  # /tmp/xyz: as shallow as /workspace/resnet50
    try:
        shutil.copytree(MODEL_DIR / "resnet50_mx", shallow / "resnet50_mx")
        proc = subprocess.run(
            [sys.executable, "-c", "import resnet50_mx.export, resnet50_mx.deploy, resnet50_mx.triton_repo"],
            env={**os.environ, "PYTHONPATH": str(shallow)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(shallow)
    assert proc.returncode == 0, proc.stderr


def test_evaluate_script_reports_top1(trained, digits_rec):
    from mx_resnet_testing import run_module, training_state

    proc = run_module("evaluate", "--checkpoint", trained, "--data-dir", digits_rec)  # classes, size: its own
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["samples"] == 359
    state = training_state(trained)
    assert result["top1"] == pytest.approx(state["metrics"]["top1"])
    # run.keep_checkpoints 1: one step folder stays, and best/ holds the epoch that scored best
    assert len(list((trained / "checkpoint").glob("step-*"))) == 1
    proc = run_module("evaluate", "--checkpoint", trained / "checkpoint" / "best", "--data-dir", digits_rec)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["top1"] == pytest.approx(state["best"]["top1"])
