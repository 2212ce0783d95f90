"""ONNX parity, the real tritonserver serving the sliding window with evaluate.sh's Dice, segment.sh on
real NIfTI files (nibabel's own anatomical test image among them), and the benchmark's table."""

import json
import os
import pathlib
import subprocess
import sys

import nibabel
import numpy as np
import onnxruntime
import pytest
import torch
from conftest import MODEL_DIR
from unet3d.data import load_cases
from unet3d.deploy import served_dice
from unet3d.evaluate import main as evaluate_main
from unet3d.export import export_onnx, export_repository
from unet3d.model import UNet3D
from zoo.triton.server import TritonServer


def script(name, *args, timeout=300):
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / name), *map(str, args)], capture_output=True, text=True, env=env,
        timeout=timeout,
    )  # fmt: skip


def test_onnx_matches_eager_with_dynamic_batch(tmp_path):
    torch.manual_seed(0)
    model = UNet3D(width=2, levels=3).eval()
    path = export_onnx(model, tmp_path / "model.onnx", (16, 16, 16))
    windows = torch.randn(3, 1, 16, 16, 16)
    with torch.no_grad():
        expected = model(windows).numpy()
    got = onnxruntime.InferenceSession(str(path)).run(None, {"windows": windows.numpy()})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)


def test_tritonserver_serves_the_sliding_window_with_the_dice_of_evaluate(trained, prepared, tmp_path):
    saved = torch.load(trained / "checkpoint.pt", weights_only=False)
    model = UNet3D(width=8, levels=4)
    model.load_state_dict(saved["model"])
    repo = tmp_path / "repo"
    export_repository(model.eval(), repo, patch=(32, 32, 32), models=("python",), max_batch_size=2)
    evaluate_main(["--checkpoint", str(trained / "checkpoint.pt"), "--data-dir", str(prepared), "--amp", "fp32",
                   "--device", "cpu", "--results-dir", str(tmp_path)])  # fmt: skip
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    with TritonServer(repo, log_path=tmp_path / "server.log") as server:
        served = served_dice(server.http_url, "unet3d_python", load_cases(prepared)["val"], (32, 32, 32), 0.5)
    assert served["dice"] == pytest.approx(evaluated["dice"], abs=1e-4)
    assert evaluated["dice"] > 0.55


def test_segment_writes_a_label_nifti_and_a_png(trained, raw_cases, tmp_path):
    anatomical = pathlib.Path(nibabel.__file__).parent / "tests" / "data" / "anatomical.nii"
    images = [raw_cases / "case_00007" / "imaging.nii.gz"] + ([anatomical] if anatomical.is_file() else [])
    for index, image in enumerate(images):
        out = tmp_path / f"seg{index}.nii.gz"
        done = script(
            "segment.sh",
            "--checkpoint",
            trained / "checkpoint.pt",
            image,
            "--output",
            out,
            "--amp",
            "fp32",
            "--device",
            "cpu",
        )
        assert done.returncode == 0, done.stderr[-2000:]
        labels = nibabel.load(str(out))
        assert labels.shape == nibabel.load(str(image)).shape[:3]
        np.testing.assert_allclose(labels.affine, nibabel.load(str(image)).affine)
        assert (tmp_path / f"seg{index}.png").read_bytes()[:4] == b"\x89PNG"
    found = np.asarray(nibabel.load(str(tmp_path / "seg0.nii.gz")).dataobj)
    truth = np.asarray(nibabel.load(str(raw_cases / "case_00007" / "segmentation.nii.gz")).dataobj)
    assert ((found > 0) & (truth > 0)).sum() > 0.5 * (truth > 0).sum()  # most of the kidneys found


def test_benchmark_prints_ours_against_monai(tmp_path):
    out = tmp_path / "bench.json"
    done = script(
        "benchmark.sh", "--recipe", MODEL_DIR / "configs" / "synthetic_cpu.yaml", "--set", "model.width=2",
        "--set", "model.levels=3", "--set", "data.patch=[16,16,16]", "--iters", "2", "--warmup", "1",
        "--device", "cpu", "--output", out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| ours |" in done.stdout and "| monai |" in done.stdout and "ours / MONAI training" in done.stdout
    assert {row["model"] for row in json.loads(out.read_text())["results"]} == {"ours", "monai"}
