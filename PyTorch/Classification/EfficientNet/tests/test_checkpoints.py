"""Pulling registry checkpoints (timm's safetensors layout) from a local HTTP server, the registry's
preprocessing in evaluation and export, and the one-line errors."""

import functools
import hashlib
import http.server
import subprocess
import threading

import pytest
import torch
import yaml
from efficientnet import checkpoints
from efficientnet.checkpoints import eval_preprocessing, extract_state_dict, load_weights, registry_entry
from efficientnet.model import efficientnet
from effnet_testutil import MODEL_DIR, assert_one_line_error, model_env, run_module
from zoo.checkpoints import CheckpointError


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """127.0.0.1 HTTP server over a folder holding a tiny timm EfficientNet as the hub serves it
    (model.safetensors), and a copy cut in half."""
    from safetensors.torch import save_file
    from timm.models.efficientnet import _gen_efficientnet

    root = tmp_path_factory.mktemp("served")
    torch.manual_seed(0)
    state = _gen_efficientnet("efficientnet_b0", channel_multiplier=0.25, num_classes=10).state_dict()
    (root / "good").mkdir()
    save_file({k: v.contiguous() for k, v in state.items()}, root / "good" / "model.safetensors")
    data = (root / "good" / "model.safetensors").read_bytes()
    (root / "cut").mkdir()
    (root / "cut" / "model.safetensors").write_bytes(data[: len(data) // 2])
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
                      "format": "safetensors", "framework": "pytorch", "model": "efficientnet_b0"})  # fmt: skip
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
        good=("good/model.safetensors", served["sha256"], served["size"]),
        truncated=("cut/model.safetensors", served["sha256"], served["size"]),
        wrong=("good/model.safetensors", "0" * 64, None),
    )  # fmt: skip
    cache = tmp_path / "cache"
    result = pull(registry, "good", cache=cache)
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip().splitlines()[-1]
    model = efficientnet("b0", width=0.25, num_classes=10)
    load_weights(model, path)  # timm's keys are ours
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


def test_registry_entries_carry_timm_preprocessing(tmp_path):
    b0, b4 = (registry_entry(f"timm-efficientnet-{v}").preprocessing for v in ("b0-ra-in1k", "b4-ra2-in1k"))
    assert (b0.resize, b0.crop, b0.interpolation) == (256, 224, "bicubic")  # crop_pct 0.875
    assert (b4.resize, b4.crop, b4.interpolation) == (384, 384, "bicubic")  # crop_pct 1.0 at 384
    assert eval_preprocessing("timm-efficientnet-b4-ra2-in1k", image_size=380) == b4
    assert eval_preprocessing(None, image_size=380).resize == 412  # ours: image_size + 32
    assert eval_preprocessing(None, image_size=224).resize == 256
    assert eval_preprocessing(None, image_size=32).resize == 36  # small images keep 7/8 of their side
    result = download_checkpoint("list", cache=tmp_path)
    assert result.returncode == 0 and "timm-efficientnet-b0-ra-in1k" in result.stdout, result.stderr
    assert_one_line_error(
        download_checkpoint("pull", "no-such-weights", cache=tmp_path),
        "no-such-weights",
        "timm-efficientnet-b0",
    )


def test_evaluate_with_a_registry_checkpoint_uses_its_preprocessing(
    tmp_path, served, digits16, monkeypatch, capsys
):
    pre = {
        "resize": 40,
        "crop": 32,
        "interpolation": "bicubic",
        "mean": [0.5, 0.5, 0.5],
        "std": [0.25, 0.25, 0.25],
    }
    registry = write_registry(
        tmp_path / "registry.yaml", served, pre, tiny=("good/model.safetensors", served["sha256"], None)
    )
    monkeypatch.setattr(checkpoints, "REGISTRY_PATH", registry)
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    from efficientnet import evaluate

    args = evaluate.parse_args(
        ["--pretrained", "tiny", "--data-dir", str(digits16), "--num-classes", "10", "--width", "0.25",
         "--device", "cpu", "--workers", "0", "--batch-size", "4", "--limit-batches", "1",
         "--results-dir", str(tmp_path)]
    )  # fmt: skip
    result = evaluate.run(args)
    assert "preprocessing: resize 40, crop 32, bicubic" in capsys.readouterr().out
    assert result["preprocessing"]["resize"] == 40 and 0 <= result["top1"] <= 100


def test_wrong_class_count_and_wrong_model_are_one_line(tmp_path):
    path = tmp_path / "ten.pt"
    torch.save(efficientnet("b0", width=0.25, num_classes=10).state_dict(), path)
    with pytest.raises(CheckpointError, match="has 10 classes but the model has 1000"):
        load_weights(efficientnet("b0", width=0.25), path)
    with pytest.raises(CheckpointError, match="does not fit this EfficientNet"):
        load_weights(efficientnet("b0", num_classes=10), path)
    # the class count comes from the weights; a --num-classes they contradict is one line naming both
    result = run_module(
        "efficientnet.evaluate", "--checkpoint", path, "--data-dir", tmp_path, "--num-classes", 1000
    )
    assert_one_line_error(result, "10 classes", "--num-classes 1000")


def test_wrapped_keys_are_unwrapped():
    state = efficientnet("b0", width=0.25, num_classes=10).state_dict()
    compiled = {"module._orig_mod." + k: v for k, v in state.items()}
    assert extract_state_dict({"model": compiled}).keys() == state.keys()
