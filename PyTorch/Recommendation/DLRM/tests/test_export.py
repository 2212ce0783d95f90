"""ONNX export parity and the python-backend model served by the real tritonserver."""

import shutil

import numpy as np
import pytest
import torch
from dlrm.data import Batches, Split
from dlrm_testing import TINY, run_module


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
        "--set",
        "train.max_steps=3",
        "--set",
        "model.hotness=[2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,3]",
    )
    return results


@pytest.fixture(scope="module")
def exported(trained, synthetic_dir, tmp_path_factory):
    from dlrm.export import load_plain, write_repository
    from dlrm.train import DEFAULT_RECIPE
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
    from dlrm.export import load_plain
    from dlrm.train import DEFAULT_RECIPE
    from zoo.recipe import load_recipe

    with pytest.raises(SystemExit, match=r"^error: .*checkpoint does not fit this recipe's model") as info:
        load_plain(load_recipe(DEFAULT_RECIPE, {}), trained / "checkpoint")
    assert "\n" not in str(info.value)


def test_python_backend_served_by_tritonserver_returns_the_same_ctrs(exported, tmp_path):
    from zoo.triton import TritonServer, infer, parse_pbtxt

    repo, dense, sparse, expected = exported
    for name in ("dlrm_onnx", "dlrm_python"):
        parse_pbtxt((repo / name / "config.pbtxt").read_text())
    served = tmp_path / "served"
    shutil.copytree(repo / "dlrm_python", served / "dlrm_python")
    with TritonServer(served, startup_timeout=180) as server:
        for protocol, url in (("http", server.http_url), ("grpc", server.grpc_url)):
            out = infer(url, "dlrm_python", {"dense": dense, "sparse": sparse}, ["ctr"], protocol=protocol)
            np.testing.assert_allclose(out["ctr"][:, 0], expected, rtol=1e-5, atol=1e-6)
