"""ONNX export parity and the python-backend model served by the real tritonserver."""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from dlrm.data import Batches, Split
from dlrm_testing import MODEL_DIR, TINY, run_module


@pytest.fixture(scope="module")
def trained(synthetic_dir, tmp_path_factory):
    """A TorchRec-trained checkpoint (3 steps) and a validation batch in the model's input form."""
    results = tmp_path_factory.mktemp("trained")
    run_module(
        "dlrm.train",
        "--data-dir",
        str(synthetic_dir),
        "--results-dir",
        str(results),
        *TINY,
        "--steps",
        "3",
        "--set",
        "model.hotness=[2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,3]",
    )
    return results


@pytest.fixture(scope="module")
def exported(trained, synthetic_dir, tmp_path_factory):
    from dlrm import DEFAULT_RECIPE
    from dlrm.export import load_plain, write_repository
    from zoo.recipe import load_recipe

    recipe = load_recipe(
        DEFAULT_RECIPE,
        {
            "model.embedding_dim": 8,
            "model.bottom_mlp": [16, 8],
            "model.top_mlp": [16],
            "model.cross_rank": 8,
            "model.hotness": [2] + [1] * 24 + [3],
        },
    )
    model, progress = load_plain(recipe, trained / "checkpoint")
    repo = write_repository(
        model,
        tmp_path_factory.mktemp("repo"),
        progress["num_dense"],
        max_batch_size=64,
        instance_kind="KIND_CPU",
    )
    rows = [min(r, 100000) for r in progress["num_embeddings"]]
    _, dense, sparse, _ = Batches(
        Split(synthetic_dir, "val"), 16, 0, 1, rows, model.sparse.hotness, drop_last=True
    ).get(0)
    with torch.no_grad():
        expected = torch.sigmoid(model(dense, sparse)).numpy()
    return repo, dense.numpy(), sparse.numpy(), expected


def test_onnx_matches_the_pytorch_model(exported):
    import onnxruntime as ort

    repo, dense, sparse, expected = exported
    assert sparse.shape == (16, 2 + 24 + 3)
    session = ort.InferenceSession(
        str(repo / "dlrm_onnx" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    (ctr,) = session.run(["ctr"], {"dense": dense, "sparse": sparse})
    assert ctr.shape == (16, 1)
    assert len(np.unique(expected.round(4))) > 4  # the model separates the rows
    np.testing.assert_allclose(ctr[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_checkpoint_of_another_model_is_a_one_line_error(trained):
    from dlrm import DEFAULT_RECIPE
    from dlrm.export import load_plain
    from zoo.errors import UserError
    from zoo.recipe import load_recipe

    with pytest.raises(UserError, match=r"^--checkpoint .*checkpoint does not fit this model") as info:
        load_plain(load_recipe(DEFAULT_RECIPE, {}), trained / "checkpoint")
    assert "\n" not in str(info.value)


def test_python_backend_served_by_tritonserver_returns_the_same_ctrs(exported, tmp_path):
    from zoo.triton.client import infer
    from zoo.triton.repository import parse_pbtxt
    from zoo.triton.server import TritonServer

    repo, dense, sparse, expected = exported
    for name in ("dlrm_onnx", "dlrm_python"):
        parse_pbtxt((repo / name / "config.pbtxt").read_text())
    served = tmp_path / "served"
    shutil.copytree(repo / "dlrm_python", served / "dlrm_python")
    with TritonServer(served, startup_timeout=180) as server:
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            out = infer(url, "dlrm_python", {"dense": dense, "sparse": sparse}, ["ctr"], protocol=protocol)
            np.testing.assert_allclose(out["ctr"][:, 0], expected, rtol=1e-5, atol=1e-6)


def test_deploy_scores_rows_and_its_load_mode_prints_a_table_without_errors(exported, synthetic_dir):
    repo = exported[0]
    command = ["bash", str(MODEL_DIR / "scripts" / "deploy_triton.sh"), "--repository", str(repo)]
    command += ["--data-dir", str(synthetic_dir), "--rows", "256", "--batch-size", "16"]
    env = {**os.environ, "PYTHON": sys.executable}
    scored = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert scored.returncode == 0, scored.stderr[-3000:]
    served = re.fullmatch(
        r"served (\d+) rows over http: AUC ([0-9.]+), [0-9.]+ ms per request of 16", scored.stdout.strip()
    )
    assert served and served[1] == "256" and 0 < float(served[2]) < 1, scored.stdout

    command += ["--concurrency", "1,2", "--requests", "8"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout.strip().splitlines()
    assert printed[-3].split()[:3] == ["concurrency", "requests", "errors"], result.stdout
    rows = [line.split() for line in printed[-2:]]
    assert [row[:3] for row in rows] == [["1", "8", "0"], ["2", "8", "0"]], result.stdout
    assert all(float(row[3]) > 0 and 0 < float(row[4]) <= float(row[5]) for row in rows), result.stdout


def test_deploy_stopped_by_sigterm_leaves_no_server_running(exported, synthetic_dir):
    import signal

    from zoo.triton.processes import signal_when_serving

    command = ["bash", str(MODEL_DIR / "scripts" / "deploy_triton.sh"), "--repository", str(exported[0])]
    command += ["--data-dir", str(synthetic_dir), "--rows", "2048", "--batch-size", "1"]
    env = {**os.environ, "PYTHON": sys.executable}
    run = signal_when_serving(command, signal.SIGTERM, ready_text="tritonserver ready", env=env, timeout=240)
    assert sorted({p.name for p in run.served_by}) == ["triton_python_backend_stub", "tritonserver"]
    assert run.left_running == [], run.output[-3000:]
    assert run.returncode != 0 and "served 2048 rows" not in run.output, (
        "the signal came after the deploy ended"
    )
    assert "Traceback" not in run.output, run.output[-3000:]
