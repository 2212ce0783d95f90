"""Data checked where it enters: TFRecord shards before the first step, classes against dataset.json,
the manifest that download_data.sh --verify writes, checkpoints of other models, bad flags. Every
case ends in one line naming the shard (and record) with nothing written to the results folder."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from zoo.errors import UserError

MODEL_DIR = Path(__file__).resolve().parents[1]
RECIPE = str(MODEL_DIR / "configs" / "digits_cpu.yaml")
GARBAGE_JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 2


def copy_data(source: Path, folder: Path, with_manifest: bool = False) -> Path:
    folder.mkdir()
    for path in source.iterdir():
        if path.is_file() and (with_manifest or path.name != "manifest.json"):
            shutil.copy2(path, folder / path.name)
    return folder


def replace_images(shard: Path, indices=None, image: bytes = GARBAGE_JPEG) -> None:
    """Rewrite ``shard`` with the JPEG of records ``indices`` (all when None) replaced by ``image``."""
    import tensorflow as tf

    records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for i, record in enumerate(records):
            if indices is None or i in indices:
                example = tf.train.Example.FromString(record)
                example.features.feature["image/encoded"].bytes_list.value[0] = image
                record = example.SerializeToString()
            writer.write(record)


def file_name(shard: Path, index: int) -> str:
    import tensorflow as tf

    record = list(tf.data.TFRecordDataset(str(shard)).skip(index).take(1))[0].numpy()
    return tf.train.Example.FromString(record).features.feature["image/filename"].bytes_list.value[0].decode()


def train(data: Path, results: Path, *extra):
    from resnet50_tf.train import main

    argv = ["--recipe", RECIPE, "--data-dir", data, "--results-dir", results, "--epochs", 1, *extra]
    return main([str(a) for a in argv])


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith("error: "), message
    return message


def test_truncated_shard_is_named(tmp_path, digits_tfrecords):
    data = copy_data(digits_tfrecords, tmp_path / "data", with_manifest=True)  # which no longer matches
    shard = data / "train-00001-of-00004"
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size - 700)
    with pytest.raises(SystemExit) as e:
        train(data, tmp_path / "results")
    message = one_line(e)
    assert message.startswith(f"error: {shard} is truncated: record ") and "runs past its end" in message
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("shard_name", ["train-00002-of-00004", "validation-00000-of-00002"])
def test_corrupt_jpeg_is_named_before_the_first_step(tmp_path, digits_tfrecords, shard_name):
    data = copy_data(digits_tfrecords, tmp_path / "data")
    shard = data / shard_name
    replace_images(shard, {7})
    with pytest.raises(SystemExit) as e:
        train(data, tmp_path / "results")
    assert one_line(e).startswith(
        f"error: {shard}: record 7 ({file_name(shard, 7)}) is not a valid image example (jpeg::Uncompress failed"
    )
    assert not (tmp_path / "results").exists()


def test_unchecked_corrupt_training_data_still_ends_in_one_line(tmp_path, digits_tfrecords, monkeypatch):
    from resnet50_tf import tfrecords

    data = copy_data(digits_tfrecords, tmp_path / "data")
    for shard in sorted(data.glob("train-*")):
        replace_images(shard)
    monkeypatch.setattr(tfrecords, "DECODE_AT_START", 100)  # as if the split were ImageNet's
    with pytest.raises(SystemExit) as e:
        train(data, tmp_path / "results", "--batch-size", 4, "--no-eval")
    message = one_line(e)
    assert message.startswith(f"error: a bad record in {data} at step 1 (")
    assert message.endswith(f"scripts/download_data.sh --verify --data-dir {data} names the shard and record")


def test_dataset_json_listing_5_of_10_classes(tmp_path, digits_tfrecords):
    data = copy_data(digits_tfrecords, tmp_path / "data")
    info = json.loads((data / "dataset.json").read_text())
    (data / "dataset.json").write_text(json.dumps({**info, "classes": info["classes"][:5]}))
    with pytest.raises(SystemExit) as e:
        train(data, tmp_path / "results")
    message = one_line(e)
    assert message.endswith(f"holds label 9, but {data / 'dataset.json'} lists 5 classes (labels 0..4)")
    assert message.startswith(f"error: {data}/train-0000")
    assert not (tmp_path / "results").exists()


def test_missing_shard_is_a_count_mismatch(tmp_path, digits_tfrecords):
    from resnet50_tf.data import read_dataset_info
    from resnet50_tf.tfrecords import check_dataset, count_records

    data = copy_data(digits_tfrecords, tmp_path / "data")
    lost = count_records(data / "train-00003-of-00004")
    (data / "train-00003-of-00004").unlink()
    with pytest.raises(UserError) as e:
        check_dataset(read_dataset_info(data), ["train"])
    assert lost > 300 and str(e.value) == (
        f"the train shards of {data} hold {1438 - lost} records, but dataset.json says 1438 "
        "(a shard is missing or was cut short: convert the data again)"
    )


def test_num_classes_flag_must_match_the_tfrecords(tmp_path, digits_tfrecords):
    with pytest.raises(SystemExit) as e:
        train(digits_tfrecords, tmp_path / "results", "--num-classes", 5)
    assert one_line(e) == (
        f"error: --num-classes 5, but {digits_tfrecords / 'dataset.json'} lists 10 classes "
        "(TFRecords bring their classes: leave --num-classes out)"
    )


def test_manifest_is_trusted_until_a_shard_changes(tmp_path, digits_tfrecords, monkeypatch):
    from resnet50_tf import tfrecords
    from resnet50_tf.data import read_dataset_info

    assert (digits_tfrecords / "manifest.json").is_file()  # the conversion decoded every record and wrote it
    data = copy_data(digits_tfrecords, tmp_path / "data", with_manifest=True)
    decoded = []
    real = tfrecords.check_content
    monkeypatch.setattr(
        tfrecords, "check_content", lambda shard, info: decoded.append(shard.name) or real(shard, info)
    )
    found = tfrecords.check_dataset(read_dataset_info(data), ["train", "val"])
    assert decoded == [] and sum(c.records for c in found["train"]) == 1438
    assert max(c.label_max for c in found["val"]) == 9
    os.utime(data / "validation-00001-of-00002")  # rewritten since: checked again
    tfrecords.check_dataset(read_dataset_info(data), ["train", "val"])
    assert decoded == ["validation-00001-of-00002"]


def test_verify_writes_the_manifest_only_for_good_data(tmp_path, digits_tfrecords):
    from resnet50_tf.prepare_data import main

    data = copy_data(digits_tfrecords, tmp_path / "data")
    main(["--verify", "--data-dir", str(data)])
    files = json.loads((data / "manifest.json").read_text())["files"]
    assert sorted(files) == sorted(p.name for p in data.glob("*-of-*"))
    assert sum(entry["records"] for name, entry in files.items() if name.startswith("train")) == 1438
    assert all(entry["decoded"] and entry["label_max"] == 9 for entry in files.values())
    (data / "manifest.json").unlink()
    replace_images(data / "train-00000-of-00004", {3}, b"not a jpeg at all")
    with pytest.raises(SystemExit) as e:
        main(["--verify", "--data-dir", str(data)])
    assert one_line(e).startswith(f"error: {data / 'train-00000-of-00004'}: record 3 (")
    assert not (data / "manifest.json").exists()


@pytest.mark.parametrize("flag", ["--init-checkpoint", "--resume"])
def test_another_models_checkpoint_is_one_line(tmp_path, digits_tfrecords, flag):
    other = tmp_path / "resnet18_checkpoint.pt"
    other.write_bytes(b"PK\x03\x04" + bytes(300))  # a PyTorch zip checkpoint's first bytes
    with pytest.raises(SystemExit) as e:
        train(digits_tfrecords, tmp_path / "results", flag, other)
    assert one_line(e) == (
        f"error: {flag} {other} is not a TensorFlow ResNet-50 checkpoint (no checkpoint/latest.json or state.json)"
    )
    assert not (tmp_path / "results").exists()


def test_checkpoint_of_other_classes_or_network(tmp_path, digits_tfrecords):
    import keras
    from resnet50_tf.checkpoint import CHECKPOINT_KIND, check_checkpoint
    from resnet50_tf.model import resnet50
    from zoo.tf import save_training_checkpoint

    five = resnet50(5, image_size=32)
    prefix = tmp_path / "five"
    save_training_checkpoint(
        prefix / "checkpoint",
        {"model": five},
        name=CHECKPOINT_KIND,
        step=1,
        epoch=0,
        recipe={},
        num_classes=5,
    )
    check_checkpoint(prefix, 5)
    with pytest.raises(UserError) as e:
        check_checkpoint(prefix, 10)
    assert str(e.value) == f"checkpoint {prefix} has 5 classes, this run 10"
    with pytest.raises(SystemExit) as e:
        train(digits_tfrecords, tmp_path / "results", "--init-checkpoint", prefix)
    assert one_line(e) == f"error: checkpoint {prefix} has 5 classes, this run 10"
    assert not (tmp_path / "results").exists()
    small = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    other = tmp_path / "small"
    save_training_checkpoint(
        other / "checkpoint", {"model": small}, name="small_mlp", step=1, epoch=0, recipe={}
    )
    with pytest.raises(UserError) as e:
        check_checkpoint(other, 10)
    assert str(e.value) == (
        f"--checkpoint {other} is not a TensorFlow ResNet-50 checkpoint (it is a checkpoint of small_mlp)"
    )


def test_evaluate_checkpoint_of_other_classes(tmp_path, digits_folder):
    """A 10-class checkpoint on a consistent 5-class dataset: named, not a 10% top-1."""
    from resnet50_tf.checkpoint import CHECKPOINT_KIND
    from resnet50_tf.convert_tfrecords import convert
    from resnet50_tf.evaluate import main
    from resnet50_tf.model import resnet50
    from zoo.tf import save_training_checkpoint

    five = tmp_path / "five"
    for split in ("train", "val"):
        for label in range(5):
            shutil.copytree(digits_folder / split / str(label), five / split / str(label))
    convert(five, tmp_path / "five_tfrecords", train_shards=1, val_shards=1, workers=1)
    run = tmp_path / "run"
    save_training_checkpoint(
        run / "checkpoint", {"model": resnet50(10, image_size=32)}, name=CHECKPOINT_KIND, step=1, epoch=0,
        recipe={}, num_classes=10, image_size=32,
    )  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main(["--checkpoint", str(run), "--data-dir", str(tmp_path / "five_tfrecords")])
    assert one_line(e) == f"error: checkpoint has 10 classes but {tmp_path / 'five_tfrecords'} has 5"


def test_bad_config_pbtxt_in_deploy(tmp_path):
    from resnet50_tf.deploy import main

    model = tmp_path / "repo" / "resnet50_tf_python"
    model.mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'name: "resnet50_tf_python"\ninput [ { name: "images" dims: [ 3, 224 '
    )
    with pytest.raises(SystemExit) as e:
        main(["--model-repository", str(tmp_path / "repo"), "--synthetic"])
    assert one_line(e).startswith(f"error: {model / 'config.pbtxt'} is not a valid model configuration: ")


@pytest.mark.parametrize(
    "module, argv",
    [
        ("evaluate", ["--checkpoint", "x", "--synthetic", "--batch-size", "0"]),
        ("evaluate", ["--checkpoint", "x", "--synthetic", "--image-size", "0"]),
        ("train", ["--synthetic", "--steps-per-epoch", "0"]),
        ("train", ["--synthetic", "--max-steps", "-3"]),
        ("deploy", ["--synthetic", "--batch-size", "0"]),
    ],
)
def test_counts_must_be_positive(module, argv):
    import importlib

    flag, value = argv[-2:]
    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"resnet50_tf.{module}").main(argv)
    assert one_line(e) == f"error: {flag} must be a positive integer, not {value}"


def test_missing_init_checkpoint(tmp_path, digits_tfrecords):
    with pytest.raises(SystemExit) as e:
        train(digits_tfrecords, tmp_path / "results", "--init-checkpoint", tmp_path / "missing")
    assert one_line(e) == f"error: --init-checkpoint {tmp_path / 'missing'}: no such checkpoint"
    assert not (tmp_path / "results").exists()
