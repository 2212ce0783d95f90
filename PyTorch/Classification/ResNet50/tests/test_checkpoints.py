"""Pulling registry checkpoints from a local HTTP server, key layouts, and the one-line errors."""

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
from resnet50.checkpoints import extract_state_dict, load_weights
from resnet50.model import resnet50
from zoo.checkpoints import CheckpointError


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


def write_registry(path, served, **entries):
    items = []
    for name, (file, sha, size) in entries.items():
        items.append({"name": name, "url": f"{served['url']}/{file}", "sha256": sha, "size": size,
                      "format": "ngc-convnets", "framework": "pytorch", "model": "resnet50"})  # fmt: skip
    path.write_text(yaml.safe_dump({"checkpoints": items}))
    return path


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
    result = download_checkpoint("good", "--registry", registry, cache=cache)
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip().splitlines()[-1]
    model = resnet50(num_classes=10)
    load_weights(model, path)  # NGC layout mapped onto ours
    for key, value in served["state"].items():
        assert torch.equal(model.state_dict()[key], value), key
    cached = sorted(p.name for p in cache.rglob("*") if p.is_file())

    for name in ("truncated", "wrong"):
        result = download_checkpoint(name, "--registry", registry, cache=cache)
        assert_one_line_error(result, "error")
        assert any(word in result.stderr.lower() for word in ("sha256", "size", "truncated", "bytes")), (
            result.stderr
        )
        assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == cached  # cache untouched


def test_unknown_checkpoint_name_is_one_line(tmp_path):
    result = download_checkpoint("no-such-weights", cache=tmp_path)
    assert_one_line_error(result, "no-such-weights", "torchvision-imagenet1k-v1")


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
