import shutil
import subprocess

import pytest
import torch
from r50_testutil import MODEL_DIR, assert_one_line_error, model_env, run_module
from zoo.imagenet_loaders import DataConfig, DataError, ShardedSampler, build_loader, check_layout


def test_layout_errors(tmp_path, digits16):
    with pytest.raises(DataError, match="does not exist"):
        check_layout(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no train/ folder"):
        check_layout(tmp_path / "empty")
    with pytest.raises(DataError, match="10 classes but the model has 1000"):
        check_layout(digits16, 1000)
    assert check_layout(digits16, 10) == [str(i) for i in range(10)]


def test_sampler_resumes_mid_epoch_and_shards():
    full = ShardedSampler(100, 8, rank=0, world_size=2, seed=3)
    full.set_epoch(2)
    order = list(full)
    assert len(order) == 6 * 8
    full.set_epoch(2, start_batch=2)
    assert list(full) == order[16:]
    other = ShardedSampler(100, 8, rank=1, world_size=2, seed=3)
    other.set_epoch(2)
    assert not set(order) & set(other)
    full.set_epoch(3)
    assert list(full) != order


@pytest.mark.parametrize("backend", ["pytorch", "gpu-decode", "synthetic"])
def test_backends_batches(digits16, backend):
    cfg = DataConfig(str(digits16), backend=backend, batch_size=16, image_size=16, workers=1, num_classes=10)
    train = build_loader(cfg, "train")
    images, labels = next(iter(train.epoch(0)))
    assert images.shape == (16, 3, 16, 16) and images.dtype == torch.float32
    assert labels.shape == (16,) and int(labels.max()) < 10
    if backend != "synthetic":
        again, _ = next(iter(train.epoch(0)))
        torch.testing.assert_close(images, again)  # per-sample seeded augmentation
        assert abs(float(images.mean())) < 2 and 0.3 < float(images.std()) < 3
        val = build_loader(cfg, "val")
        assert sum(len(y) for _, y in val.epoch(0)) == val.samples_per_epoch


def test_dali_cpu_backend(digits16):
    pytest.importorskip("nvidia.dali")
    cfg = DataConfig(
        str(digits16), backend="dali-cpu", batch_size=16, image_size=16, workers=1, num_classes=10
    )
    images, labels = next(iter(build_loader(cfg, "train").epoch(0)))
    assert images.shape == (16, 3, 16, 16) and labels.shape == (16,)


def test_missing_data_dir_is_one_line(tmp_path):
    result = run_module(
        "resnet50.train", "--data-dir", tmp_path / "missing", "--recipe", "configs/digits_cpu.yaml",
        "--results-dir", tmp_path / "r",
    )  # fmt: skip
    assert_one_line_error(result, "does not exist", "missing")
    assert not (tmp_path / "r").exists()  # nothing written for a run that could not start


def test_corrupt_jpeg_is_one_line_naming_the_file(tmp_path, digits16):
    data = tmp_path / "data"
    shutil.copytree(digits16, data)
    bad = data / "train" / "3" / "zz_corrupt.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    result = run_module(
        "resnet50.train", "--recipe", "configs/digits_cpu.yaml", "--data-dir", data, "--results-dir", tmp_path / "r",
        "--image-size", 16, "--batch-size", 1500, "--workers", 1, "--epochs", 1, "--steps-per-epoch", 1,
    )  # fmt: skip
    assert_one_line_error(result, "zz_corrupt.jpg")


def test_a_corrupt_validation_image_ends_training_at_start_up(tmp_path, digits16):
    data = tmp_path / "data"
    shutil.copytree(digits16, data)
    (data / "val" / "7" / "zz_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut short")
    result = run_module(
        "resnet50.train", "--recipe", "configs/digits_cpu.yaml", "--data-dir", data, "--results-dir", tmp_path / "r",
        "--image-size", 16, "--workers", 1, "--epochs", 1,
    )  # fmt: skip
    assert_one_line_error(result, "zz_broken.jpg")
    assert not (tmp_path / "r").exists()  # found before any training step or file was written


def test_verify_writes_a_manifest_that_training_trusts_until_a_file_changes(tmp_path, digits16):
    from zoo.imagenet_loaders.verify import check_split, verify
    from zoo.manifest import DataManifest

    data = tmp_path / "data"
    shutil.copytree(digits16, data)
    classes = check_layout(data)
    images = sorted(p for p in data.rglob("*") if p.suffix in (".jpg", ".png"))
    assert check_split(data, "val", classes) == len(list((data / "val").rglob("*.*")))  # no manifest yet
    verify(data)
    manifest = DataManifest.read(data)
    assert len(manifest.files) == len(images) and all(manifest.lookup(p) for p in images)
    assert check_split(data, "val", classes) == 0  # every image vouched for: none decoded again
    changed = next(iter((data / "val").rglob("*.*")))
    changed.write_bytes(changed.read_bytes() + b"\0")
    assert check_split(data, "val", classes) == 1  # only the changed file is decoded again


def test_verify_names_a_corrupt_image_and_writes_no_manifest(tmp_path, digits16):
    data = tmp_path / "data"
    shutil.copytree(digits16, data)
    (data / "train" / "2" / "zz_bad.jpg").write_bytes(b"not an image at all")
    result = subprocess.run(
        ["bash", "scripts/download_data.sh", "--verify", "--data-dir", str(data)],
        capture_output=True, text=True, cwd=MODEL_DIR, env=model_env(), timeout=300,
    )  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "zz_bad.jpg" in result.stderr.strip().splitlines()[-1]
    assert not (data / "manifest.json").exists()


@pytest.mark.parametrize("split", ["train", "val"])
def test_gpu_decode_matches_the_pytorch_backend(tmp_path, split):
    """Same crop boxes and flips per sample; roi_align's resize is within a few % of PIL's."""
    from zoo.data.datasets import make_digits_imagefolder

    data = make_digits_imagefolder(tmp_path, image_size=32, val_fraction=0.1)
    batches = {}
    for backend in ("pytorch", "gpu-decode"):
        cfg = DataConfig(str(data), backend=backend, batch_size=64, image_size=24, workers=0, num_classes=10)
        batches[backend] = next(iter(build_loader(cfg, split).epoch(3)))
    (reference, labels), (ours, our_labels) = batches["pytorch"], batches["gpu-decode"]
    assert torch.equal(labels, our_labels)
    error = float((ours - reference).abs().mean())
    other_sample = float((ours.roll(1, 0) - reference).abs().mean())
    assert error < 0.05, error  # measured 0.011 (train) and 0.017 (val); another image: 0.6-1.5
    assert other_sample > 10 * error
    if split == "train":
        assert float((ours.flip(3) - reference).abs().mean()) > 10 * error  # flips agree


def cut_after_the_header(image):
    """Keep the JPEG's header (the loader workers read it) and 20 bytes of its scan: decoding fails."""
    encoded = image.read_bytes()
    image.write_bytes(encoded[: encoded.index(b"\xff\xda") + 20])


def test_gpu_decode_of_a_corrupt_jpeg_names_the_file(tmp_path, digits16):
    data = tmp_path / "data"
    shutil.copytree(digits16, data)
    image = sorted((data / "val").rglob("*.jpg"))[7]
    cut_after_the_header(image)  # the workers read the header fine; the decoder fails
    cfg = DataConfig(
        str(data), backend="gpu-decode", batch_size=4000, image_size=16, workers=0, num_classes=10
    )
    with pytest.raises(DataError, match=f"corrupt or unreadable JPEG .*{image.name}"):
        next(iter(build_loader(cfg, "val").epoch(0)))  # one batch of every validation image


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (nvJPEG and the prefetch thread)")
def test_gpu_decode_on_gpu_is_close_to_the_cpu_batch(digits16):
    """On CUDA (nvJPEG, the prefetch thread on its own stream, pinned bytes) the batch is within a few %
    of the same loader's on the CPU (libjpeg), with the same labels, flips and crops."""
    batches = {}
    for device in ("cpu", "cuda"):
        cfg = DataConfig(
            str(digits16), backend="gpu-decode", batch_size=64, image_size=16, workers=2, num_classes=10,
            device=device, channels_last=True,
        )  # fmt: skip
        epoch = build_loader(cfg, "train").epoch(1)
        images, labels = next(epoch)
        batches[device] = images.cpu(), labels.cpu()
        epoch.close()
    (cpu, cpu_labels), (gpu, gpu_labels) = batches["cpu"], batches["cuda"]
    assert torch.equal(cpu_labels, gpu_labels)
    error = float((gpu - cpu).abs().mean())
    assert error < 0.05 and float((gpu.roll(1, 0) - cpu).abs().mean()) > 10 * error
