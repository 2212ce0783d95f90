"""Data checked where it enters: RecordIO records before the C++ reader sees them, class counts
against the data, the manifest that download_data.sh --verify writes, and bad flags. Every case ends
in one line naming the file (and record) with nothing written to the results folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import pytest
from mx_resnet_testing import MODEL_DIR, RECIPE
from resnet50_mx import records
from resnet50_mx.prepare_data import main as prepare_main
from zoo.errors import UserError


def run_failing(module: str, *args) -> str:
    """``python -m resnet50_mx.<module> args`` that must fail; its one stderr line (no traceback)."""
    env = dict(os.environ, PYTHONPATH=str(MODEL_DIR), OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", f"resnet50_mx.{module}", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 1, f"exit {proc.returncode}:\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: "), lines[-1]
    return lines[-1]


def copy_data(digits_rec: Path, folder: Path, with_manifest: bool = False) -> Path:
    folder.mkdir()
    for name in ("train.rec", "train.idx", "val.rec", "val.idx", "classes.txt"):
        shutil.copy2(digits_rec / name, folder / name)
    if with_manifest:
        shutil.copy2(digits_rec / "manifest.json", folder / "manifest.json")
    return folder


def replace_image(folder: Path, split: str, key: int, image: bytes) -> None:
    """Rewrite ``split``.rec/.idx with record ``key``'s image replaced (what a bad source image gives)."""
    old = mx.recordio.MXIndexedRecordIO(str(folder / f"{split}.idx"), str(folder / f"{split}.rec"), "r")
    items = [(k, old.read_idx(k)) for k in old.keys]
    old.close()
    new = mx.recordio.MXIndexedRecordIO(str(folder / f"{split}.idx"), str(folder / f"{split}.rec"), "w")
    for k, item in items:
        if k == key:
            header, _ = mx.recordio.unpack(item)
            item = mx.recordio.pack(header, image)
        new.write_idx(k, item)
    new.close()


def train_args(data: Path, results: Path, *extra) -> list:
    return [
        "--recipe",
        RECIPE,
        "--data-dir",
        data,
        "--epochs",
        1,
        "--steps-per-epoch",
        1,
        "--results-dir",
        results,
        *extra,
    ]


def offset_of(folder: Path, split: str, key: int) -> int:
    return dict(records.read_index(folder / f"{split}.idx"))[key]


def test_truncated_train_rec_is_named_not_a_segfault(tmp_path, digits_rec):
    data = copy_data(digits_rec, tmp_path / "data", with_manifest=True)  # the manifest no longer matches
    rec = data / "train.rec"
    with open(rec, "r+b") as f:
        f.truncate(rec.stat().st_size // 2)
    line = run_failing("train", *train_args(data, tmp_path / "results"))
    assert line.startswith(f"error: {rec} is truncated: record ")
    key = int(line.split("record ")[1].split()[0])
    assert f"(byte {offset_of(data, 'train', key)})" in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "split, image",
    [
        ("train", b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4),
        ("train", b"hello, not an image"),
        ("val", b"\xff\xd8"),
    ],
    ids=["train-garbage-jpeg", "train-not-an-image", "val-cut-jpeg"],
)
def test_undecodable_image_in_rec_is_named_before_the_first_epoch(tmp_path, digits_rec, split, image):
    data = copy_data(digits_rec, tmp_path / "data")
    replace_image(data, split, 7, image)
    line = run_failing("train", *train_args(data, tmp_path / "results"))
    assert line == (
        f"error: {data / (split + '.rec')} record 7 (byte {offset_of(data, split, 7)}): the image cannot be "
        f"decoded ({len(image)} bytes, starting {image[:4].hex()}); re-create the file from good images"
    )
    assert not (tmp_path / "results").exists()  # found before any epoch, nothing written


def test_index_that_does_not_fit_the_rec(tmp_path, digits_rec):
    data = copy_data(digits_rec, tmp_path / "data")
    lines = (data / "train.idx").read_text().splitlines()
    key, offset = lines[3].split("\t")
    lines[3] = f"{key}\t{int(offset) + 2}"
    (data / "train.idx").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as e:
        records.check_dataset(data, ["train"])
    assert str(e.value) == (
        f"{data / 'train.rec'} record {key} (byte {int(offset) + 2}): no record starts there "
        "(the .idx does not fit the .rec)"
    )


def test_num_classes_is_checked_against_the_data(tmp_path, digits_rec):
    line = run_failing("train", *train_args(digits_rec, tmp_path / "results", "--num-classes", 5))
    assert line == (
        "error: the recipe (model.num_classes, --num-classes) has 5 classes, but "
        f"{digits_rec / 'classes.txt'} lists 10: pass --num-classes 10"
    )
    assert not (tmp_path / "results").exists()
    # without classes.txt the labels decide: label 9 needs 10 classes
    data = copy_data(digits_rec, tmp_path / "data")
    (data / "classes.txt").unlink()
    found = records.check_dataset(data, ["train", "val"])
    assert records.class_count(data, found)[0] == 10
    with pytest.raises(UserError) as e:
        records.require_classes(data, found, 5, "the recipe", "pass --num-classes {count}")
    assert "has labels up to 9: pass --num-classes 10" in str(e.value)
    records.require_classes(data, found, 12, "the recipe", "")  # more outputs than labels is allowed


def test_checkpoint_of_other_classes_is_refused_by_evaluate(tmp_path, digits_rec):
    from resnet50_mx.model import build_model

    net = build_model(5)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 3, 32, 32)))
    net.save_parameters(str(tmp_path / "five.params"))
    line = run_failing("evaluate", "--checkpoint", tmp_path / "five.params", "--data-dir", digits_rec)
    assert line == (
        f"error: checkpoint {tmp_path / 'five.params'} has 5 classes, but {digits_rec / 'classes.txt'} "
        "lists 10: evaluate a checkpoint on data of the classes it was trained on"
    )


def test_labels_beyond_classes_txt(tmp_path, digits_rec):
    data = copy_data(digits_rec, tmp_path / "data")
    (data / "classes.txt").write_text("0\n1\n2\n3\n4\n")  # 5 of the 10 class folders
    with pytest.raises(UserError) as e:
        records.check_dataset(data, ["val"])
    assert f"has label 9, but {data / 'classes.txt'} lists 5 classes" in str(e.value)


def test_manifest_is_trusted_until_a_file_changes(tmp_path, digits_rec, monkeypatch):
    assert (digits_rec / "manifest.json").is_file()  # the conversion decoded every image and wrote it
    data = copy_data(digits_rec, tmp_path / "data", with_manifest=True)
    scanned = []
    real = records.check_split
    monkeypatch.setattr(
        records, "check_split", lambda rec, idx, **kw: scanned.append(rec.name) or real(rec, idx, **kw)
    )
    found = records.check_dataset(data, ["train", "val"])
    assert scanned == [] and found["train"].records == 1438 and found["val"].label_max == 9
    os.utime(data / "val.rec")  # rewritten since: checked again
    assert records.check_dataset(data, ["train", "val"])["val"].records == 359
    assert scanned == ["val.rec"]


def test_verify_decodes_every_image_and_writes_the_manifest(tmp_path, digits_rec):
    data = copy_data(digits_rec, tmp_path / "data")
    prepare_main(["--verify", "--data-dir", str(data), "--threads", "2"])
    manifest = (data / "manifest.json").read_text()
    assert '"train.rec"' in manifest and '"decoded": true' in manifest and '"records": 359' in manifest
    replace_image(data, "train", 11, b"\xff\xd8\xff\xe0broken")
    (data / "manifest.json").unlink()
    with pytest.raises(SystemExit) as e:
        prepare_main(["--verify", "--data-dir", str(data)])
    assert str(e.value).startswith(f"error: {data / 'train.rec'} record 11 (byte ")
    assert not (data / "manifest.json").exists()  # nothing vouches for bad files
    with pytest.raises(SystemExit) as e:
        prepare_main(["--verify", "--data-dir", str(tmp_path / "nothing")])
    assert str(e.value) == f"error: data dir {tmp_path / 'nothing'} does not exist"


def test_large_training_split_without_manifest_is_not_decoded(tmp_path, digits_rec, monkeypatch, capsys):
    data = copy_data(digits_rec, tmp_path / "data")
    replace_image(data, "train", 3, b"not an image")
    monkeypatch.setattr(records, "DECODE_AT_START", 100)  # as if train.rec held ImageNet
    found = records.check_dataset(data, ["train"])
    assert not found["train"].decoded and found["train"].records == 1438
    assert "download_data.sh --verify" in capsys.readouterr().err


@pytest.mark.parametrize(
    "resume, expect",
    [
        (
            "foreign.pt",
            "is not an MXNet ResNet-50 training checkpoint (no checkpoint/latest.json or state.json)",
        ),
        ("state.json", "is not an MXNet ResNet-50 training checkpoint (no name, recipe in"),
    ],
)
def test_resume_from_another_models_checkpoint(tmp_path, digits_rec, resume, expect):
    (tmp_path / "foreign.pt").write_bytes(b"PK\x03\x04\x80\x02}q\x00(X\x05\x00\x00\x00model" + bytes(200))
    (tmp_path / "state.json").write_text('{"epoch": 3, "step": 30}')
    line = run_failing("train", *train_args(digits_rec, tmp_path / "results", "--resume", tmp_path / resume))
    assert line.startswith(f"error: --resume {tmp_path / resume} {expect}")
    assert not (tmp_path / "results").exists()


def test_resume_with_other_class_count(trained):
    from resnet50_mx.checkpoint import CHECKPOINT_KIND, WHAT
    from resnet50_mx.train import check_resume_fits
    from zoo.mx import load_training_checkpoint

    state = load_training_checkpoint(trained, name=CHECKPOINT_KIND, what=WHAT)
    with pytest.raises(UserError) as e:
        check_resume_fits(trained, state, num_classes=12, layout="NCHW")
    assert str(e.value).startswith(f"cannot resume from {trained}: it has num_classes 10, this run 12")
    check_resume_fits(trained, state, num_classes=10, layout="NCHW")
    with pytest.raises(UserError) as e:  # the weights are read too, not only the state's word for it
        check_resume_fits(trained, {**state, "num_classes": 12}, num_classes=12, layout="NCHW")
    assert str(e.value).endswith("its weights have 10 classes, this run 12")


@pytest.mark.parametrize(
    "module, flag, value",
    [
        ("evaluate", "--batch-size", 0),
        ("evaluate", "--batch-size", -3),
        ("evaluate", "--image-size", 0),
        ("train", "--steps-per-epoch", 0),
        ("train", "--stop-after", -1),
        ("benchmark", "--batch-size", -3),
        ("benchmark", "--image-size", 0),
        ("export", "--max-batch-size", 0),
    ],
)
def test_counts_must_be_positive(module, flag, value):
    import importlib

    argv = {
        "evaluate": ["--checkpoint", "x", "--data-dir", "y"],
        "train": ["--recipe", str(RECIPE)],
        "benchmark": [],
        "export": ["--checkpoint", "x"],
    }[module]
    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"resnet50_mx.{module}").main([*argv, flag, str(value)])
    assert str(e.value) == f"error: {flag} must be a positive integer, not {value}"


def test_deploy_refuses_a_bad_config_and_counts(tmp_path, digits_rec):
    from resnet50_mx.deploy import main

    model = tmp_path / "repo" / "resnet50_mx_python"
    model.mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'name: "resnet50_mx_python"\ninput [ { name: "images"\n  dims: three\n'
    )
    argv = ["--model-repository", str(tmp_path / "repo"), "--data-dir", str(digits_rec)]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert (
        str(e.value)
        == f"error: {model / 'config.pbtxt'} is not a model configuration written by export_triton.sh"
    )
    with pytest.raises(SystemExit) as e:
        main([*argv, "--batch-size", "0"])
    assert str(e.value) == "error: --batch-size must be a positive integer, not 0"
    # not the server's "failed to load all models": the reason, before the server starts
    (model / "config.pbtxt").write_text('name: "resnet50_mx_python"\ninput [ { name: "images" dims: [ 3, 32 ')
    with pytest.raises(SystemExit) as e:
        main([*argv, "--image-size", "32", "--num-images", "8"])
    assert str(e.value).startswith(f"error: {model / 'config.pbtxt'}: not a Triton ModelConfig: ")


def test_pytorch_checkpoint_given_as_weights(tmp_path):
    from resnet50_mx.checkpoint import load_for_inference

    foreign = tmp_path / "resnet18_checkpoint.pt"
    foreign.write_bytes(b"PK\x03\x04" + bytes(300))  # torch.save writes a zip archive
    with pytest.raises(UserError) as e:
        load_for_inference(str(foreign))
    assert (
        str(e.value) == f"{foreign} is not an MXNet parameter file but a zip archive (a PyTorch checkpoint?)"
    )


def test_records_split_at_the_magic_are_read_whole(tmp_path):
    """RecordIO splits a record whose data holds the magic number into parts; the check joins them."""
    import struct

    magic = struct.pack("<I", records.MAGIC)
    writer = mx.recordio.MXIndexedRecordIO(str(tmp_path / "x.idx"), str(tmp_path / "x.rec"), "w")
    written = {}
    for key, body in enumerate([b"abcd" * 3, b"abcd" * 3 + magic + b"1234" + magic * 2 + b"xy", b"efgh"]):
        written[key] = mx.recordio.pack(mx.recordio.IRHeader(0, float(key), key, 0), body)
        writer.write_idx(key, written[key])
    writer.close()
    size = (tmp_path / "x.rec").stat().st_size
    with open(tmp_path / "x.rec", "rb") as f:
        read = {
            key: records._read_parts(f, tmp_path / "x.rec", key, offset, size, whole=True)
            for key, offset in records.read_index(tmp_path / "x.idx")
        }
    assert {key: data for key, (data, _) in read.items()} == written
    assert [parts for _, parts in read.values()] == [1, 4, 1]
    check = records.check_split(tmp_path / "x.rec", tmp_path / "x.idx", decode=False)
    assert (check.records, check.label_max, check.label_max_key) == (3, 2, 2)
