"""Bad input ends in one clear line (zoo.errors.UserError; an entry point prints it), and pretrained pulls are verified."""

from __future__ import annotations

import functools
import hashlib
import http.server
import shutil
import threading
import zipfile
from pathlib import Path

import mxnet as mx
import pytest
from mx_resnet_testing import MODEL_DIR, RECIPE
from resnet50_mx.checkpoint import fetch_pretrained, load_for_inference
from resnet50_mx.data import DataSpec, build_loader
from resnet50_mx.prepare_data import convert
from resnet50_mx.train import build_parser, recipe_from_args
from zoo.errors import UserError


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_missing_data_dir():
    spec = DataSpec("recordio", "/nonexistent/imagenet", 8, 32, 10)
    with pytest.raises(UserError) as e:
        build_loader(spec, train=True, epoch=0, seed=0, ctx=mx.cpu())
    assert "/nonexistent/imagenet does not exist" in one_line(e)


def test_data_dir_without_recordio(tmp_path):
    spec = DataSpec("recordio", str(tmp_path), 8, 32, 10)
    with pytest.raises(UserError) as e:
        build_loader(spec, train=True, epoch=0, seed=0, ctx=mx.cpu())
    assert "has no train.rec" in one_line(e)


def test_unknown_data_backend():
    with pytest.raises(UserError) as e:
        build_loader(DataSpec("lmdb", None, 8, 32, 10), train=True, epoch=0, seed=0, ctx=mx.cpu())
    assert "unknown data backend 'lmdb'" in one_line(e)


def test_corrupt_jpeg_is_named(tmp_path):
    for split, count in (("train", 3), ("val", 1)):
        folder = tmp_path / "images" / split / "cat"
        folder.mkdir(parents=True)
        for i in range(count):
            shutil.copy(MODEL_DIR / "tests" / "data" / "tiny.jpg", folder / f"{i}.jpg")
    (tmp_path / "images" / "train" / "cat" / "1.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(UserError) as e:
        convert(tmp_path / "images", tmp_path / "rec", threads=1)
    message = one_line(e)
    assert "could not be decoded" in message and "1.jpg" in message
    assert not (tmp_path / "rec" / "train.rec").exists()


def test_image_folder_without_train(tmp_path):
    with pytest.raises(UserError) as e:
        convert(tmp_path, tmp_path / "rec")
    assert "has no train/ folder" in one_line(e)


def test_unknown_recipe_key():
    args = build_parser().parse_args(["--recipe", str(RECIPE), "--set", "optimizer.lr_per_265=0.1"])
    with pytest.raises(UserError) as e:
        recipe_from_args(args)
    assert "lr_per_265" in one_line(e)


@pytest.mark.parametrize(
    "module, argv, message",
    [
        ("train", ["--config", "x.yaml"], "error: --config was renamed: use --recipe"),
        ("train", ["--amp", "none"], "error: --amp none was renamed: use --amp fp32"),
        ("train", ["--amp=none"], "error: --amp none was renamed: use --amp fp32"),
        ("train", ["--no-resume"], "error: --no-resume was renamed: use --resume none"),
        ("train", ["--target-accuracy", "0.76"], "error: --target-accuracy was renamed: use --target-top1"),
        (
            "evaluate",
            ["--checkpoint", "x", "--precision", "fp16"],
            "error: --precision was renamed: use --amp",
        ),
        ("benchmark", ["--amp", "none"], "error: --amp none was renamed: use --amp fp32"),
        ("prepare_data", ["--digits", "--out", "x"], "error: --out was renamed: use --data-dir"),
    ],
)
def test_old_spellings_name_the_new_one(module, argv, message):
    import importlib

    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"resnet50_mx.{module}").main(argv)
    assert one_line(e) == message


def test_target_top1_is_a_percentage():
    args = build_parser().parse_args(["--recipe", str(RECIPE), "--target-top1", "0.759"])
    with pytest.raises(UserError) as e:
        recipe_from_args(args)
    assert "--target-top1 is a percentage" in one_line(e) and "75.9" in str(e.value)
    args = build_parser().parse_args(["--recipe", str(RECIPE), "--target-top1", "75.9"])
    assert recipe_from_args(args)["run"]["target"]["value"] == 75.9


def test_set_is_repeatable():
    argv = ["--recipe", str(RECIPE), "--set", "optimizer.momentum=0.8", "--set", "run.epochs=3"]
    recipe = recipe_from_args(build_parser().parse_args(argv))
    assert recipe["optimizer"]["momentum"] == 0.8 and recipe["run"]["epochs"] == 3


def test_recipe_amp_none_is_refused(tmp_path):
    argv = ["--recipe", str(RECIPE), "--set", "run.precision=none", "--results-dir", str(tmp_path)]
    args = build_parser().parse_args(argv)
    with pytest.raises(UserError) as e:
        recipe_from_args(args)
    assert "run.precision must be one of bf16, fp16, fp32, not 'none'" in one_line(e)


def test_existing_checkpoint_needs_an_explicit_resume(tmp_path):
    from resnet50_mx.train import resume_from

    latest = tmp_path / "checkpoint" / "latest.json"
    latest.parent.mkdir()
    latest.write_text("{}")

    def resume_of(*extra):
        argv = ["--recipe", str(RECIPE), "--results-dir", str(tmp_path), *extra]
        found = resume_from(build_parser().parse_args(argv))
        return None if found is None else str(found)

    with pytest.raises(UserError) as e:
        resume_of()
    assert "pass --resume auto to continue it, --resume none to start over" in one_line(e)
    assert resume_of("--resume", "auto") == str(latest)
    assert resume_of("--resume", "none") is None
    assert resume_of("--resume", str(latest)) == str(latest)
    with pytest.raises(UserError) as e:
        resume_of("--resume", str(tmp_path / "missing.json"))
    assert "no such checkpoint" in one_line(e)


def test_wrong_class_count_in_checkpoint(trained):
    with pytest.raises(UserError) as e:
        load_for_inference(str(trained), num_classes=1000)
    assert "has 10 classes, but 1000 were asked for" in one_line(e)


def test_corrupt_params_file(tmp_path):
    bad = tmp_path / "broken.params"
    bad.write_bytes(b"\x00" * 100)
    with pytest.raises(UserError) as e:
        load_for_inference(str(bad))
    assert "is not an MXNet parameter file" in one_line(e)


def test_a_params_file_cut_short_is_refused_by_a_digestless_pull(tmp_path):
    """zoo.io's check of a registry entry of format mxnet-params walks the file MXNet wrote to its end."""
    from zoo.io import _format_problem

    path = tmp_path / "w.params"
    dense = {"arg:w": mx.nd.ones((4, 3)), "aux:n": mx.nd.array([1, 2], dtype="int64")}
    sparse = {"c": mx.nd.ones((3, 3)).tostype("csr"), "r": mx.nd.ones((3, 3)).tostype("row_sparse")}
    for arrays in (dense, sparse):
        mx.nd.save(str(path), arrays)
        whole = path.read_bytes()
        assert _format_problem(path, "mxnet-params") is None
        for kept in (len(whole) - 1, len(whole) // 2, 40):
            path.write_bytes(whole[:kept])
            assert f"cut short: its records run past its {kept} bytes" in _format_problem(
                path, "mxnet-params"
            )


def test_unknown_checkpoint_name():
    with pytest.raises(UserError) as e:
        load_for_inference("resnet50_nonexistent")
    assert "unknown checkpoint 'resnet50_nonexistent'" in one_line(e)
    assert "resnet50_v1b_gluoncv" in str(e.value)


def test_fp16_amp_on_cpu_is_refused(tmp_path, digits_rec):
    from resnet50_mx.train import run_training

    args = build_parser().parse_args(
        [
            "--recipe",
            str(RECIPE),
            "--amp",
            "fp16",
            "--data-dir",
            str(digits_rec),
            "--results-dir",
            str(tmp_path),
        ]
    )
    with pytest.raises(UserError) as e:
        run_training(recipe_from_args(args), args)
    assert "needs a GPU" in one_line(e)


@pytest.fixture()
def http_root(tmp_path):
    """A folder served over HTTP on 127.0.0.1; yields (folder, base url)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def _gluoncv_style_zip(params: Path, folder: Path, name: str, hash_prefix: str | None = None) -> str:
    """Zip ``params`` as GluonCV does: <name>-<sha1[:8]>.zip holding <name>-<sha1[:8]>.params."""
    prefix = hash_prefix or hashlib.sha1(params.read_bytes()).hexdigest()[:8]
    stem = f"{name}-{prefix}"
    with zipfile.ZipFile(folder / f"{stem}.zip", "w") as zf:
        zf.write(params, f"{stem}.params")
    return f"{stem}.zip"


def _registry(tmp_path, url: str, preprocessing: str = "") -> Path:
    path = tmp_path / "checkpoints.yaml"
    path.write_text(
        "checkpoints:\n"
        "  - name: digits_v1b\n"
        f"    url: {url}\n"
        "    sha256: null\n    size: null\n    format: zip\n"
        "    framework: mxnet\n    model: ResNet50\n"
        + (f"    preprocessing: {{{preprocessing}}}\n" if preprocessing else "")
    )
    return path


def test_pretrained_pull_from_local_server(tmp_path, http_root, trained):
    root, base = http_root
    params = trained / "final.params"
    zip_name = _gluoncv_style_zip(params, root, "resnet50_v1b")
    cache = tmp_path / "cache"
    path = fetch_pretrained("digits_v1b", cache, _registry(tmp_path, f"{base}/{zip_name}"))
    assert path.read_bytes() == params.read_bytes()
    net, meta = load_for_inference(str(path))
    assert meta["num_classes"] == 10
    # a second pull is served from the cache, without the server
    (root / zip_name).unlink()
    assert fetch_pretrained("digits_v1b", cache, _registry(tmp_path, f"{base}/{zip_name}")) == path


def test_pretrained_with_wrong_sha1_is_refused(tmp_path, http_root, trained):
    root, base = http_root
    zip_name = _gluoncv_style_zip(trained / "final.params", root, "resnet50_v1b", hash_prefix="deadbeef")
    cache = tmp_path / "cache"
    with pytest.raises(UserError) as e:
        fetch_pretrained("digits_v1b", cache, _registry(tmp_path, f"{base}/{zip_name}"))
    assert "does not match the SHA-1 deadbeef" in one_line(e)
    assert not [p for p in cache.rglob("*") if p.is_file()]  # neither the .params nor the zip is kept


def test_pretrained_bad_zip_is_not_cached(tmp_path, http_root):
    root, base = http_root
    (root / "html-0ecdba34.zip").write_text("<!DOCTYPE html><html><body>Access denied</body></html>")
    (root / "cut-0ecdba34.zip").write_bytes(b"PK\x03\x04" + b"\0" * 64)  # a zip's first bytes, then nothing
    cache = tmp_path / "cache"
    for name, message in (
        ("html", "not a zip archive but an HTML page"),
        ("cut", "a zip cut short or damaged"),
    ):
        with pytest.raises(UserError) as e:
            fetch_pretrained("digits_v1b", cache, _registry(tmp_path, f"{base}/{name}-0ecdba34.zip"))
        assert message in one_line(e) and "\n" not in str(e.value)
        assert not [p for p in cache.rglob("*") if p.is_file()]


def test_registry_preprocessing_reaches_evaluation(
    tmp_path, http_root, trained, digits_rec, monkeypatch, capsys
):
    from resnet50_mx import checkpoint, evaluate
    from zoo.checkpoints import Preprocessing

    root, base = http_root
    zip_name = _gluoncv_style_zip(trained / "final.params", root, "resnet50_v1b")
    pre = "resize: 30, crop: 24, interpolation: bicubic, mean: [0, 0, 0], std: [1, 1, 1]"
    monkeypatch.setattr(checkpoint, "REGISTRY", _registry(tmp_path, f"{base}/{zip_name}", pre))
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    _, meta = checkpoint.resolve("digits_v1b")
    assert meta["image_size"] == 24 and meta["preprocessing"].resize == 30
    result = evaluate.main(
        ["--checkpoint", "digits_v1b", "--data-dir", str(digits_rec), "--batch-size", "64"]
    )
    assert result["preprocessing"] == {
        "resize": 30, "interpolation": "bicubic", "mean": (0.0, 0.0, 0.0), "std": (255.0, 255.0, 255.0), "crop": 24
    }  # fmt: skip
    assert "preprocessing: resize 30, crop 24, bicubic" in capsys.readouterr().err
    # the loader applies it: pixels / 255 in [0, 1] at 24 x 24, where ours are mean/std normalised
    spec = DataSpec("recordio", str(digits_rec), 8, 24, 10, val_preprocessing=meta["preprocessing"])
    images = next(iter(build_loader(spec, train=False, epoch=0, seed=0, ctx=mx.cpu())))[0].asnumpy()
    assert images.shape == (8, 3, 24, 24) and images.min() >= 0 and images.max() <= 1 and images.max() > 0.5
    ours = DataSpec("recordio", str(digits_rec), 8, 24, 10)
    assert next(iter(build_loader(ours, train=False, epoch=0, seed=0, ctx=mx.cpu())))[0].asnumpy().min() < 0
    assert isinstance(meta["preprocessing"], Preprocessing)


def test_pretrained_missing_on_server(tmp_path, http_root):
    _, base = http_root
    with pytest.raises(UserError) as e:
        fetch_pretrained("digits_v1b", tmp_path / "cache", _registry(tmp_path, f"{base}/nothing.zip"))
    assert "404" in one_line(e) or "not found" in str(e.value).lower()


def test_dali_backend_without_dali(digits_rec):
    try:
        import nvidia.dali  # noqa: F401

        pytest.skip("DALI is installed here")
    except ImportError:
        pass
    spec = DataSpec("dali-gpu", str(digits_rec), 8, 32, 10)
    with pytest.raises(UserError) as e:
        build_loader(spec, train=True, epoch=0, seed=0, ctx=mx.cpu())
    assert "needs NVIDIA DALI's MXNet plugin" in one_line(e)


def test_horovod_flag_without_horovod():
    from resnet50_mx.processes import Processes

    try:
        import horovod.mxnet  # noqa: F401

        pytest.skip("Horovod is installed here")
    except ImportError:
        pass
    with pytest.raises(UserError) as e:
        Processes("device", 1, horovod=True)
    assert "--horovod needs horovod" in one_line(e)
