"""prepare_imagenet on tiny tarballs with the real ILSVRC2012 structure."""

import io
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from zoo.data.imagenet import prepare_imagenet, read_val_labels
from zoo.errors import UserError

WNIDS = ["n01440764", "n01443537", "n01484850"]  # ILSVRC2012_IDs 1, 2, 3 in the fake meta.mat
VAL_IDS = [3, 1, 1, 2, 3]  # ground truth of ILSVRC2012_val_00000001..5


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def tarballs(tmp_path):
    import scipy.io

    train = tmp_path / "ILSVRC2012_img_train.tar"
    with tarfile.open(train, "w") as outer:
        for k, wnid in enumerate(WNIDS):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as t:
                for j in range(k + 2):
                    _add(t, f"{wnid}_{j}.JPEG", f"{wnid}/{j}".encode())
            _add(outer, f"{wnid}.tar", inner.getvalue())

    val = tmp_path / "ILSVRC2012_img_val.tar"
    with tarfile.open(val, "w") as t:
        for i in range(1, len(VAL_IDS) + 1):
            _add(t, f"ILSVRC2012_val_{i:08d}.JPEG", f"val{i}".encode())

    # meta.mat: a struct array 'synsets' as in the devkit, leaves first, then an inner node (ID 1001)
    fields = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")]
    synsets = np.zeros((len(WNIDS) + 1, 1), dtype=fields)
    for k, wnid in enumerate([*WNIDS, "n00000001"]):
        synsets[k, 0] = (float(k + 1 if k < len(WNIDS) else 1001), wnid, f"class {k}", 0.0)
    mat = io.BytesIO()
    scipy.io.savemat(mat, {"synsets": synsets})
    devkit = tmp_path / "ILSVRC2012_devkit_t12.tar.gz"
    with tarfile.open(devkit, "w:gz") as t:
        _add(t, "ILSVRC2012_devkit_t12/data/meta.mat", mat.getvalue())
        truth = "".join(f"{i}\n" for i in VAL_IDS).encode()
        _add(t, "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", truth)
    return train, val, devkit


def test_prepare_from_devkit(tarballs, tmp_path):
    train, val, devkit = tarballs
    out = prepare_imagenet(train, val, devkit, tmp_path / "imagenet")
    assert sorted(p.name for p in (out / "train").iterdir()) == WNIDS
    for k, wnid in enumerate(WNIDS):
        files = sorted((out / "train" / wnid).iterdir())
        assert [f.name for f in files] == [f"{wnid}_{j}.JPEG" for j in range(k + 2)]
        assert files[-1].read_bytes() == f"{wnid}/{k + 1}".encode()
    for i, label in enumerate(VAL_IDS, 1):
        image = out / "val" / WNIDS[label - 1] / f"ILSVRC2012_val_{i:08d}.JPEG"
        assert image.read_bytes() == f"val{i}".encode()
    assert sorted(p.name for p in out.iterdir()) == [".zoo_imagenet.json", "train", "val"]

    stamp = (out / "val" / WNIDS[2] / "ILSVRC2012_val_00000001.JPEG").stat().st_mtime_ns
    prepare_imagenet(train, val, devkit, out)  # idempotent
    assert (out / "val" / WNIDS[2] / "ILSVRC2012_val_00000001.JPEG").stat().st_mtime_ns == stamp


def test_resumes_after_interruption(tarballs, tmp_path):
    train, val, devkit = tarballs
    out = tmp_path / "imagenet"
    (out / ".staging" / "train" / WNIDS[1]).mkdir(parents=True)  # a class cut off half way
    (out / ".staging" / "train" / WNIDS[1] / "junk.JPEG").write_bytes(b"half")
    (out / "train" / WNIDS[0]).mkdir(parents=True)  # a class finished earlier
    (out / "train" / WNIDS[0] / "kept.JPEG").write_bytes(b"done")
    prepare_imagenet(train, val, devkit, out)
    assert [f.name for f in (out / "train" / WNIDS[0]).iterdir()] == ["kept.JPEG"]
    assert sorted(f.name for f in (out / "train" / WNIDS[1]).iterdir()) == [
        f"{WNIDS[1]}_{j}.JPEG" for j in range(3)
    ]
    assert not (out / ".staging").exists()


def test_label_file_instead_of_devkit_and_val_only(tarballs, tmp_path):
    _, val, _ = tarballs
    labels = tmp_path / "val_labels.csv"
    rows = [f"ILSVRC2012_val_{i:08d}.JPEG,{WNIDS[k - 1]}" for i, k in enumerate(VAL_IDS, 1)]
    labels.write_text("filename,wnid\n" + "\n".join(rows) + "\n")
    out = prepare_imagenet(None, val, labels, tmp_path / "val_only")
    assert not (out / "train").exists()
    assert sorted(f.name for f in (out / "val" / WNIDS[0]).iterdir()) == [
        "ILSVRC2012_val_00000002.JPEG",
        "ILSVRC2012_val_00000003.JPEG",
    ]


def test_devkit_labels_match_label_file(tarballs):
    _, _, devkit = tarballs
    assert read_val_labels(devkit) == {
        f"ILSVRC2012_val_{i:08d}.JPEG": WNIDS[k - 1] for i, k in enumerate(VAL_IDS, 1)
    }


def test_bad_inputs(tarballs, tmp_path):
    train, val, devkit = tarballs
    with pytest.raises(UserError, match="ImageNet train file not found"):
        prepare_imagenet(tmp_path / "nope.tar", val, devkit, tmp_path / "o")
    with pytest.raises(UserError, match="not the official ILSVRC2012 train md5"):
        prepare_imagenet(train, val, devkit, tmp_path / "o", verify_md5=True)
    with pytest.raises(UserError, match="holds no per-class tars"):
        prepare_imagenet(val, val, devkit, tmp_path / "o")
    assert not (tmp_path / "o" / "train").exists()


def test_cli(tarballs, tmp_path):
    train, val, devkit = tarballs
    help_text = subprocess.run(
        [sys.executable, "-m", "zoo.data.imagenet", "--help"], capture_output=True, text=True
    )
    assert help_text.returncode == 0 and "--devkit" in help_text.stdout
    run = subprocess.run(
        [sys.executable, "-m", "zoo.data.imagenet", "--train-tar", str(train), "--val-tar", str(val)]
        + ["--devkit", str(devkit), "--out-dir", str(tmp_path / "cli")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "train: 9 images in 3 classes, val: 5 images in 3 classes" in run.stdout
