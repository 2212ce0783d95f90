"""ONNX parity with eager at image sizes other than the export's, and the python-backend model served by
the real tritonserver answering like PyTorch."""

import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from maskrcnn.export import OUTPUTS, write_repository
from maskrcnn.model import SingleImageModel, build_model

MODEL_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    # Score threshold 0: an untrained model still returns detections to compare.
    return build_model(
        4, variant="tiny", min_size=128, max_size=192, box_score_thresh=0.0, box_detections_per_img=8
    )


@pytest.fixture(scope="module")
def repo(model, tmp_path_factory):
    return write_repository(model, tmp_path_factory.mktemp("repo") / "triton", instance_kind="KIND_CPU")


def image(height, width, seed):
    return torch.rand(3, height, width, generator=torch.Generator().manual_seed(seed))


def assert_same(got: dict, want: dict):
    assert len(want["scores"]) == 8
    np.testing.assert_allclose(got["boxes"], want["boxes"].numpy(), atol=1e-2)
    np.testing.assert_array_equal(got["labels"], want["labels"].numpy())
    np.testing.assert_allclose(got["scores"], want["scores"].numpy(), atol=1e-4)
    np.testing.assert_allclose(got["masks"], want["masks"].numpy(), atol=1e-3)


def test_onnx_runs_any_image_size_like_pytorch(model, repo):
    import onnxruntime as ort
    from zoo.triton.repository import parse_pbtxt

    for name in ("maskrcnn_onnx", "maskrcnn_python"):
        parse_pbtxt((repo / name / "config.pbtxt").read_text())
    session = ort.InferenceSession(str(repo / "maskrcnn_onnx" / "1" / "model.onnx"))
    for height, width, seed in ((128, 128, 1), (150, 210, 2)):
        x = image(height, width, seed)
        with torch.no_grad():
            want = dict(zip(OUTPUTS, SingleImageModel(model.eval())(x), strict=True))
        got = dict(zip(OUTPUTS, session.run(list(OUTPUTS), {"image": x.numpy()}), strict=True))
        assert got["masks"].shape[2:] == (height, width)
        assert_same(got, want)


def test_python_backend_served_by_tritonserver_answers_like_pytorch(model, repo, tmp_path):
    from zoo.triton.client import infer
    from zoo.triton.server import TritonServer

    served = tmp_path / "served"
    shutil.copytree(repo / "maskrcnn_python", served / "maskrcnn_python")
    x = image(140, 176, 3)
    with torch.no_grad():
        want = model.eval()([x])[0]
    with TritonServer(served, startup_timeout=180) as server:
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            got = infer(url, "maskrcnn_python", {"image": x.numpy()}, list(OUTPUTS), protocol=protocol)
            assert_same(got, want)
        # A value outside [0, 1] is refused with the reason, not served.
        with pytest.raises(Exception, match="above its maximum"):
            infer(server.http_url, "maskrcnn_python", {"image": x.numpy() * 255}, list(OUTPUTS))


def test_deploy_serves_the_repository_and_draws(repo, tmp_path, capsys):
    from maskrcnn.deploy import main as deploy_main
    from PIL import Image

    Image.new("RGB", (150, 120), (40, 120, 200)).save(tmp_path / "blue.png")
    deploy_main(
        [
            "--repository",
            str(repo),
            "--threshold",
            "0.0",
            "--output",
            str(tmp_path / "out"),
            str(tmp_path / "blue.png"),
        ]
    )
    printed = capsys.readouterr().out
    assert "blue.png: 8 objects >= 0.0" in printed
    assert Image.open(tmp_path / "out" / "blue.png").size == (150, 120)


def test_deploy_load_mode_prints_a_table_without_errors(repo, tmp_path):
    import subprocess

    from PIL import Image

    images = []
    for size, colour in (((150, 120), (40, 120, 200)), ((128, 160), (200, 60, 30))):
        images.append(tmp_path / f"{colour[0]}.png")
        Image.new("RGB", size, colour).save(images[-1])
    command = ["bash", str(MODEL_DIR / "scripts" / "deploy_triton.sh"), "--repository", str(repo)]
    command += ["--concurrency", "1,2", "--requests", "4", *map(str, images)]
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-3].split()[:3] == ["concurrency", "requests", "errors"], result.stdout
    rows = [line.split() for line in lines[-2:]]
    assert [row[:3] for row in rows] == [["1", "4", "0"], ["2", "4", "0"]], result.stdout
    assert all(float(row[3]) > 0 and 0 < float(row[4]) <= float(row[5]) for row in rows), result.stdout


def test_deploy_stopped_by_sigterm_leaves_no_tritonserver_or_stub(repo, tmp_path):
    from PIL import Image
    from zoo.triton.processes import signal_when_serving

    Image.new("RGB", (160, 128), (40, 120, 200)).save(tmp_path / "blue.png")
    command = [
        sys.executable,
        "-m",
        "maskrcnn.deploy",
        "--repository",
        str(repo),
        *[str(tmp_path / "blue.png")] * 8,
    ]
    env = {**os.environ, "PYTHONPATH": str(MODEL_DIR)}
    run = signal_when_serving(command, signal.SIGTERM, ready_text="tritonserver ready", env=env, cwd=tmp_path)
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output
    assert run.returncode != 0


def test_count_line_names_the_best_score_when_none_reaches_the_threshold():
    from maskrcnn.detect import count_line

    assert count_line(torch.tensor([0.9, 0.6, 0.2]), 0.5) == "2 objects >= 0.5"
    assert count_line(torch.tensor([0.31, 0.12]), 0.5) == (
        "0 objects >= 0.5 (best score 0.310 of 2 detections: lower --threshold)"
    )
    assert count_line(np.zeros(0, np.float32), 0.5) == "0 objects >= 0.5 (no detection at any score)"
