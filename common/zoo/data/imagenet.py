"""Lay out ImageNet (ILSVRC2012) from the official tarballs as out/{train,val}/<wnid>/*.JPEG.

The licence means the user downloads the tarballs from image-net.org; this module checks and
unpacks them:

    python -m zoo.data.imagenet --train-tar ILSVRC2012_img_train.tar --val-tar ILSVRC2012_img_val.tar \\
        --devkit ILSVRC2012_devkit_t12.tar.gz --out-dir /data/imagenet [--md5]

``ILSVRC2012_img_train.tar`` holds one tar per class (``n01440764.tar``, ...);
``ILSVRC2012_img_val.tar`` holds 50,000 JPEGs whose classes come from the devkit:
``data/ILSVRC2012_validation_ground_truth.txt`` gives an ILSVRC2012_ID per image in file order and
``data/meta.mat`` maps ILSVRC2012_ID to WordNet ID. A ``filename,wnid`` text/CSV file may stand in
for the devkit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import shutil
import tarfile

from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.log import MetricsLogger

OFFICIAL_MD5 = {
    "train": "1d675b47d978889d74fa0da5fadfb00e",  # ILSVRC2012_img_train.tar
    "val": "29b22e2961454d5413ddabcf34fc5622",  # ILSVRC2012_img_val.tar
    "devkit": "fa75699e90414af021442c21a62c3abf",  # ILSVRC2012_devkit_t12.tar.gz
}
_WNID = re.compile(r"n\d{8}")
_DONE = ".zoo_imagenet.json"


def prepare_imagenet(train_tar, val_tar, devkit_tar, out_dir, *, verify_md5: bool = False) -> pathlib.Path:
    """Verify the tarballs, extract train (a tar of per-class tars) and val (labelled from the devkit).

    ``devkit_tar`` may also be a ``val_labels.txt``/CSV of "filename,wnid" lines; ``train_tar`` may
    be None to lay out val only. Idempotent: each class folder of train, and val as a whole, appear
    by an atomic rename once complete, so a rerun after an interruption redoes only what is missing.
    """
    out = pathlib.Path(out_dir)
    inputs = {"train": train_tar, "val": val_tar, "devkit": devkit_tar}
    for role, path in inputs.items():
        if path is not None and not pathlib.Path(path).is_file():
            raise UserError(f"ImageNet {role} file not found: {path}")
    if verify_md5:
        for role, path in inputs.items():
            if path is not None and not _is_label_file(path):
                _check_md5(role, pathlib.Path(path))

    splits = ["train", "val"] if train_tar is not None else ["val"]
    if (out / _DONE).is_file() and all(s in json.loads((out / _DONE).read_text()) for s in splits):
        return out
    labels = read_val_labels(devkit_tar)
    staging = out / ".staging"
    counts = {}
    if train_tar is not None:
        n_classes = len(set(labels.values()))
        counts["train"] = _extract_train(pathlib.Path(train_tar), out / "train", staging / "train", n_classes)
    counts["val"] = _extract_val(pathlib.Path(val_tar), labels, out / "val", staging / "val")
    shutil.rmtree(staging, ignore_errors=True)
    (out / _DONE).write_text(json.dumps(counts) + "\n")
    print(
        ", ".join(f"{split}: {n['images']:,} images in {n['classes']} classes" for split, n in counts.items())
    )
    return out


def read_val_labels(devkit) -> dict[str, str]:
    """{validation file name: wnid} from the devkit tarball or a "filename,wnid" text/CSV file."""
    devkit = pathlib.Path(devkit)
    if _is_label_file(devkit):
        return _read_label_file(devkit)
    try:
        with tarfile.open(devkit) as tar:
            members = {pathlib.PurePosixPath(m.name).as_posix(): m for m in tar.getmembers() if m.isfile()}
            meta = _member(tar, members, "data/meta.mat", devkit)
            truth = _member(tar, members, "data/ILSVRC2012_validation_ground_truth.txt", devkit)
            id_to_wnid = _read_meta(meta)
            ids = [int(line) for line in truth.read().decode().split()]
    except tarfile.TarError as e:
        raise UserError(f"devkit {devkit} is not a readable tarball: {e}") from None
    try:
        return {f"ILSVRC2012_val_{i:08d}.JPEG": id_to_wnid[k] for i, k in enumerate(ids, 1)}
    except KeyError as e:
        raise UserError(f"devkit {devkit}: ground truth ILSVRC2012_ID {e} is not in meta.mat") from None


def _is_label_file(path) -> bool:
    return pathlib.Path(path).suffix.lower() in (".txt", ".csv")


def _read_label_file(path: pathlib.Path) -> dict[str, str]:
    labels = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = [f for f in re.split(r"[,\s]+", line.strip()) if f]
        if not fields:
            continue
        wnid = next((f for f in fields[1:] if _WNID.fullmatch(f)), None)
        if wnid is None:
            if number == 1:  # a header line
                continue
            raise UserError(f"{path}:{number}: expected 'filename,wnid', got {line.strip()!r}")
        name = fields[0] if "." in fields[0] else fields[0] + ".JPEG"
        labels[name] = wnid
    if not labels:
        raise UserError(f"{path} holds no 'filename,wnid' lines")
    return labels


def _member(tar: tarfile.TarFile, members: dict, suffix: str, devkit):
    for name, member in members.items():
        if name.endswith(suffix):
            return tar.extractfile(member)
    raise UserError(f"devkit {devkit} has no {suffix}")


def _read_meta(fileobj) -> dict[int, str]:
    import io

    import scipy.io

    synsets = scipy.io.loadmat(io.BytesIO(fileobj.read()), squeeze_me=True)["synsets"]
    return {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in synsets}


def _check_md5(role: str, path: pathlib.Path) -> None:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    if digest.hexdigest() != OFFICIAL_MD5[role]:
        raise UserError(
            f"{path}: md5 {digest.hexdigest()} is not the official ILSVRC2012 {role} md5 {OFFICIAL_MD5[role]}"
        )


def _extract_train(
    train_tar: pathlib.Path, dest: pathlib.Path, staging: pathlib.Path, n_classes: int
) -> dict:
    """Stream the outer tar; unpack each class tar into staging, then rename it into dest."""
    images = classes = 0
    with (
        MetricsLogger(desc="train classes", total_steps=n_classes) as log,
        tarfile.open(train_tar, mode="r|") as outer,
    ):
        for member in outer:
            wnid = pathlib.PurePosixPath(member.name).stem
            if not (member.isfile() and member.name.endswith(".tar") and _WNID.fullmatch(wnid)):
                continue
            classes += 1
            if (dest / wnid).is_dir():
                n = sum(1 for _ in (dest / wnid).iterdir())
            else:
                n = _extract_flat(tarfile.open(fileobj=outer.extractfile(member), mode="r|"), staging / wnid)
                dest.mkdir(parents=True, exist_ok=True)
                (staging / wnid).rename(dest / wnid)
            images += n
            log.progress(classes, items=n)
    if classes == 0:
        raise UserError(f"{train_tar} holds no per-class tars (n01440764.tar, ...): is it the train tarball?")
    return {"images": images, "classes": classes}


def _extract_val(val_tar: pathlib.Path, labels: dict, dest: pathlib.Path, staging: pathlib.Path) -> dict:
    """Sort the flat val JPEGs into staging/<wnid>/, then rename the whole folder to dest."""
    if not dest.is_dir():
        shutil.rmtree(staging, ignore_errors=True)
        with (
            MetricsLogger(desc="val images", total_steps=len(labels)) as log,
            tarfile.open(val_tar, mode="r|") as tar,
        ):
            done = 0
            for member in tar:
                name = pathlib.PurePosixPath(member.name).name
                if not member.isfile():
                    continue
                if name not in labels:
                    raise UserError(f"{val_tar}: {name} has no label in the devkit/label file")
                _write(tar.extractfile(member), staging / labels[name] / name)
                done += 1
                log.progress(done, items=1)
        if done != len(labels):
            raise UserError(f"{val_tar} holds {done} images but the labels list {len(labels)}")
        staging.rename(dest)
    folders = [d for d in dest.iterdir() if d.is_dir()]
    return {"images": sum(len(list(d.iterdir())) for d in folders), "classes": len(folders)}


def _extract_flat(tar: tarfile.TarFile, folder: pathlib.Path) -> int:
    """Write the tar's files (by base name, so no path can escape ``folder``); return their number."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    n = 0
    with tar:
        for member in tar:
            if member.isfile():
                _write(tar.extractfile(member), folder / pathlib.PurePosixPath(member.name).name)
                n += 1
    return n


def _write(fileobj, path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        shutil.copyfileobj(fileobj, f, 1 << 20)


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.data.imagenet",
        description="Check the ILSVRC2012 tarballs you downloaded and lay them out as "
        "OUT/train/<wnid>/*.JPEG and OUT/val/<wnid>/*.JPEG.",
    )
    parser.add_argument("--train-tar", help="ILSVRC2012_img_train.tar (omit to prepare val only)")
    parser.add_argument("--val-tar", required=True, help="ILSVRC2012_img_val.tar")
    labels = parser.add_mutually_exclusive_group(required=True)
    labels.add_argument("--devkit", help="ILSVRC2012_devkit_t12.tar.gz (validation labels)")
    labels.add_argument(
        "--val-labels", help="instead of the devkit: a text/CSV file of 'filename,wnid' lines"
    )
    parser.add_argument("--out-dir", required=True, help="where train/ and val/ are written")
    parser.add_argument("--md5", action="store_true", help="check the official md5 of each tarball (slow)")
    args = parser.parse_args(argv)
    prepare_imagenet(
        args.train_tar, args.val_tar, args.devkit or args.val_labels, args.out_dir, verify_md5=args.md5
    )


if __name__ == "__main__":
    main()
