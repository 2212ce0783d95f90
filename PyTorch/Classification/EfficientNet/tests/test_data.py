"""The shared ImageNet pipeline (zoo.imagenet_loaders) as EfficientNet reads it: RandAugment and
AutoAugment on real photographs, drawn per sample from the seed (exact resume), the B4 crop, and the
one-line errors."""

import pytest
import torch
from zoo.imagenet_loaders import DataConfig, DataError, build_loader


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """scikit-learn's two sample photographs (427x640 JPEGs of a temple and a flower) as a two-class
    image folder, cut into eight overlapping crops each."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    root = tmp_path_factory.mktemp("photos")
    for name, pixels in zip(("china", "flower"), load_sample_images().images, strict=True):
        image = Image.fromarray(pixels)
        for split in ("train", "val"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(8 if split == "train" else 2):
                image.crop((20 * i, 10 * i, 20 * i + 400, 10 * i + 380)).save(folder / f"{i}.jpg", quality=90)
    return root


def batches(photos, augment, image_size=64, seed=0):
    cfg = DataConfig(str(photos), batch_size=4, image_size=image_size, workers=0, num_classes=2, seed=seed,
                     augment=augment)  # fmt: skip
    return list(build_loader(cfg, "train").epoch(0))


@pytest.mark.parametrize("augment", ["randaugment", "autoaugment"])
def test_augmentation_is_drawn_from_the_seed(photos, augment):
    first, again, plain = batches(photos, augment), batches(photos, augment), batches(photos, None)
    assert len(first) == 4 and first[0][0].shape == (4, 3, 64, 64)
    for (images, labels), (same, same_labels) in zip(first, again, strict=True):
        torch.testing.assert_close(images, same)
        assert torch.equal(labels, same_labels)
    assert any(not torch.equal(a[0], b[0]) for a, b in zip(first, plain, strict=True))
    assert not torch.equal(first[0][0], batches(photos, augment, seed=1)[0][0])


def test_resumed_epoch_gives_the_same_augmented_batches(photos):
    cfg = DataConfig(
        str(photos), batch_size=4, image_size=48, workers=1, num_classes=2, augment="randaugment"
    )
    loader = build_loader(cfg, "train")
    whole, resumed = list(loader.epoch(3)), list(loader.epoch(3, start_batch=2))
    for (images, _), (same, _) in zip(whole[2:], resumed, strict=True):
        torch.testing.assert_close(images, same)


def test_b4_validation_crop(photos):
    from efficientnet.checkpoints import default_preprocessing

    pre = default_preprocessing(380)
    assert (pre.resize, pre.crop, pre.interpolation) == (412, 380, "bicubic")
    cfg = DataConfig(
        str(photos), batch_size=2, image_size=380, workers=0, num_classes=2, val_preprocessing=pre
    )
    images, labels = next(build_loader(cfg, "val").epoch(0))
    assert images.shape == (2, 3, 380, 380) and labels.tolist() == [0, 0]


def test_augment_errors_are_one_line(photos):
    with pytest.raises(DataError, match="data.augment randaugment is applied by --data-backend pytorch only"):
        build_loader(
            DataConfig(str(photos), backend="gpu-decode", num_classes=2, augment="randaugment"), "train"
        )
    with pytest.raises(DataError, match="unknown data.augment 'trivial'"):
        build_loader(DataConfig(str(photos), num_classes=2, augment="trivial"), "train")
