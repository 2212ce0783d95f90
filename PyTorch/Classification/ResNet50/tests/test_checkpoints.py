"""Pulling registry checkpoints from a local HTTP server, key layouts, the registry's preprocessing in
evaluation and export, and the one-line errors."""

import functools
import hashlib
import http.server
import re
import subprocess
import threading

import pytest
import torch
import yaml
from r50_testutil import MODEL_DIR, assert_one_line_error, model_env, run_module
from resnet50 import checkpoints
from resnet50.checkpoints import eval_preprocessing, extract_state_dict, load_weights, registry_entry
from resnet50.model import resnet50
from zoo.checkpoints import CheckpointError
from zoo.imagenet_loaders import default_preprocessing, eval_transform


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """127.0.0.1 HTTP server over a folder holding a small-classifier checkpoint in NGC's layout."""
    root = tmp_path_factory.mktemp("served")
    state = resnet50(num_classes=10).state_dict()
    # NGC ConvNets layout: DDP prefix and layers.N stage names, wrapped in {"state_dict": ...}.
    ngc = {
        "module." + re.sub(r"^layer(\d)\.", lambda m: f"layers.{int(m[1]) - 1}.", k): v
        for k, v in state.items()
    }
    assert "module.layers.3.2.conv3.weight" in ngc
    torch.save({"state_dict": ngc, "epoch": 90}, root / "good.pth")
    data = (root / "good.pth").read_bytes()
    (root / "truncated.pth").write_bytes(data[: len(data) // 2])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{server.server_port}", "sha256": hashlib.sha256(data).hexdigest(),
           "size": len(data), "state": state}  # fmt: skip
    server.shutdown()


def write_registry(path, served, preprocessing=None, **entries):
    items = []
    for name, (file, sha, size) in entries.items():
        items.append({"name": name, "url": f"{served['url']}/{file}", "sha256": sha, "size": size,
                      "format": "pytorch", "framework": "pytorch", "model": "resnet50"})  # fmt: skip
        if preprocessing:
            items[-1]["preprocessing"] = preprocessing
    path.write_text(yaml.safe_dump({"checkpoints": items}))
    return path


def pull(registry, name, *, cache):
    return run_module("zoo.checkpoints", "--registry", registry, "pull", name, ZOO_CACHE=str(cache))


def download_checkpoint(*args, cache):
    return subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / "download_checkpoint.sh"), *map(str, args)],
        capture_output=True, text=True, timeout=300, env=model_env(ZOO_CACHE=str(cache)),
    )  # fmt: skip


def test_pull_good_truncated_and_wrong_digest(tmp_path, served):
    registry = write_registry(
        tmp_path / "registry.yaml", served,
        good=("good.pth", served["sha256"], served["size"]),
        truncated=("truncated.pth", served["sha256"], served["size"]),
        wrong=("good.pth", "0" * 64, None),
    )  # fmt: skip
    cache = tmp_path / "cache"
    result = pull(registry, "good", cache=cache)
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip().splitlines()[-1]
    model = resnet50(num_classes=10)
    load_weights(model, path)  # NGC layout mapped onto ours
    for key, value in served["state"].items():
        assert torch.equal(model.state_dict()[key], value), key
    cached = sorted(p.name for p in cache.rglob("*") if p.is_file())

    for name in ("truncated", "wrong"):
        result = pull(registry, name, cache=cache)
        assert_one_line_error(result, "error")
        assert any(word in result.stderr.lower() for word in ("sha256", "size", "truncated", "bytes")), (
            result.stderr
        )
        assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == cached  # cache untouched


def test_unknown_checkpoint_name_is_one_line(tmp_path):
    result = download_checkpoint("pull", "no-such-weights", cache=tmp_path)
    assert_one_line_error(result, "no-such-weights", "torchvision-imagenet1k-v1")


def test_download_checkpoint_usage_list_and_old_spellings(tmp_path):
    result = download_checkpoint("--help", cache=tmp_path)
    assert (
        result.returncode == 0 and "usage: scripts/download_checkpoint.sh {list,pull NAME}" in result.stdout
    )
    result = download_checkpoint(cache=tmp_path)
    assert result.returncode != 0 and "usage:" in result.stderr
    result = download_checkpoint("list", cache=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["torchvision-imagenet1k-v2"][1:6] == ["pytorch", "-", "top1", "80.858", "top5"]
    assert_one_line_error(
        download_checkpoint("--list", cache=tmp_path), "scripts/download_checkpoint.sh list"
    )
    assert_one_line_error(
        download_checkpoint("torchvision-imagenet1k-v2", cache=tmp_path),
        "scripts/download_checkpoint.sh pull torchvision-imagenet1k-v2",
    )


def test_v2_entry_is_evaluated_at_resize_232():
    v1, v2 = (registry_entry(f"torchvision-imagenet1k-{v}").preprocessing for v in ("v1", "v2"))
    assert (v2.resize, v2.crop, v2.interpolation) == (232, 224, "bilinear")
    assert (v1.resize, v1.crop) == (256, 224) and v1 == default_preprocessing(224)
    assert eval_preprocessing("torchvision-imagenet1k-v2", image_size=224) == v2
    assert eval_preprocessing(None, image_size=160) == default_preprocessing(160)
    from PIL import Image
    from torchvision.transforms import v2 as T

    image = Image.fromarray(torch.randint(0, 255, (300, 400, 3), dtype=torch.uint8).numpy())
    got = eval_transform(v2)(image)
    resized = T.PILToTensor()(T.CenterCrop(224)(T.Resize(232)(image)))  # PIL, bilinear
    expected = T.Normalize(v2.mean, v2.std)(T.ToDtype(torch.float32, scale=True)(resized))
    assert got.shape == (3, 224, 224)
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, eval_transform(v1)(image))  # resize 256 crops a different region


def test_evaluate_and_export_use_the_entry_preprocessing(tmp_path, served, digits16, monkeypatch, capsys):
    pre = {
        "resize": 40,
        "crop": 32,
        "interpolation": "bicubic",
        "mean": [0.5, 0.5, 0.5],
        "std": [0.25, 0.25, 0.25],
    }
    registry = write_registry(
        tmp_path / "registry.yaml", served, pre, tiny=("good.pth", served["sha256"], None)
    )
    monkeypatch.setattr(checkpoints, "REGISTRY_PATH", registry)
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    from resnet50 import evaluate, export

    args = evaluate.parse_args(
        ["--pretrained", "tiny", "--data-dir", str(digits16), "--num-classes", "10", "--device", "cpu",
         "--workers", "0", "--batch-size", "4", "--limit-batches", "1", "--results-dir", str(tmp_path)]
    )  # fmt: skip
    result = evaluate.run(args)
    assert (
        "preprocessing: resize 40, crop 32, bicubic, mean (0.5, 0.5, 0.5), std (0.25"
        in capsys.readouterr().out
    )
    assert result["preprocessing"]["resize"] == 40 and result["preprocessing"]["crop"] == 32

    config = export.triton_config(
        "m", "onnx", image_size=32, num_classes=10, max_batch_size=8, instance_kind="KIND_CPU", instance_count=1,
        preprocessing=eval_preprocessing("tiny", 224),
    )  # fmt: skip
    assert list(config.input[0].dims) == [3, 32, 32]
    assert config.parameters["preprocessing_resize"].string_value == "40"
    assert config.parameters["preprocessing_interpolation"].string_value == "bicubic"
    assert config.parameters["preprocessing_std"].string_value == "0.25,0.25,0.25"


def test_wrong_class_count_is_one_line(tmp_path):
    path = tmp_path / "ten.pt"
    torch.save(resnet50(num_classes=10).state_dict(), path)
    with pytest.raises(CheckpointError, match="has 10 classes but the model has 1000"):
        load_weights(resnet50(), path)
    result = run_module(
        "resnet50.evaluate", "--checkpoint", path, "--num-classes", 1000, "--data-dir", tmp_path
    )
    assert_one_line_error(result, "10 classes", "1000")


def test_key_layouts_and_registry_entries():
    state = resnet50(num_classes=10).state_dict()
    compiled = {"_orig_mod." + k: v for k, v in state.items()}
    assert extract_state_dict({"model": compiled}).keys() == state.keys()
    registry = yaml.safe_load((MODEL_DIR / "checkpoints.yaml").read_text())["checkpoints"]
    urls = {e["name"]: e["url"] for e in registry}
    assert urls["torchvision-imagenet1k-v1"].endswith("resnet50-0676ba61.pth")
    assert urls["torchvision-imagenet1k-v2"].endswith("resnet50-11ad3fa6.pth")
    assert "api.ngc.nvidia.com" in urls["ngc-resnet50-pyt-amp-20.06"]
