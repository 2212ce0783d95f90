"""KiTS19 as the MLPerf reference prepares it: NIfTI cases read with nibabel, resampled to a common spacing,
clipped and normalised, padded to the patch size and stored as npy.

    prepare_dataset(raw_dir, data_dir)        # raw_dir/case_XXXXX/{imaging,segmentation}.nii.gz
    # -> data_dir/case_XXXXX_x.npy (float32 [1, D, H, W]), case_XXXXX_y.npy (uint8 [1, D, H, W]),
    #    data_dir/dataset.json ({"train": [...], "val": [...], ...})

The facts are the MLPerf reference's (mlcommons/training, image_segmentation/pytorch): 210 cases, 42 of
them held out for evaluation (EVAL_CASES), target spacing 1.6 x 1.2 x 1.2 mm, intensities clipped to
[-79, 304] HU, then (x - 101.0) / 76.9, every side edge-padded to at least 128 voxels. The reference
publishes the md5 of each npy file it writes (its checksum.json, kept here as kits19_md5.json): every
prepared KiTS19 file is compared with it and the count of equal files is recorded in dataset.json.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
from zoo.errors import UserError
from zoo.io import atomic_write

CASES = 210  # case_00000 .. case_00209: the KiTS19 cases with published segmentations
EVAL_CASES = (
    0, 3, 5, 6, 12, 24, 34, 41, 44, 49, 52, 56, 61, 65, 66, 70, 76, 78, 80, 84, 86,
    87, 92, 111, 112, 125, 128, 138, 157, 160, 161, 162, 169, 171, 176, 185, 187, 189, 198, 203, 206, 207,
)  # fmt: skip
TARGET_SPACING = (1.6, 1.2, 1.2)
CLIP_RANGE = (-79.0, 304.0)
MEAN, STD = 101.0, 76.9
MIN_SHAPE = (128, 128, 128)
CLASSES = ("background", "kidney", "tumour")
DATASET_FILE = "dataset.json"
REFERENCE_MD5 = pathlib.Path(__file__).with_name("kits19_md5.json")


def case_name(case_id: int) -> str:
    return f"case_{case_id:05d}"


def load_nifti(path, what: str) -> tuple[np.ndarray, tuple[float, float, float]]:
    """(voxels as float32, voxel spacing in mm) of a NIfTI file; a missing or unreadable file is a UserError."""
    import nibabel

    path = pathlib.Path(path)
    if not path.is_file():
        raise UserError(f"{what} {path} not found")
    try:
        image = nibabel.load(str(path))
        voxels = np.asarray(image.dataobj, dtype=np.float32)
    except Exception as e:  # noqa: BLE001 - nibabel, gzip and zlib each raise their own types
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise UserError(f"{what} {path} is not a readable NIfTI file ({reason})") from None
    if voxels.ndim != 3:
        raise UserError(f"{what} {path} has {voxels.ndim} dimensions, not 3 (shape {voxels.shape})")
    spacing = tuple(float(s) for s in image.header.get_zooms()[:3])
    return voxels, spacing


def load_case(case_dir) -> tuple[np.ndarray, np.ndarray, tuple[float, float, float]]:
    """(image, label, spacing) of one KiTS19 case folder; the label must have the image's shape."""
    case_dir = pathlib.Path(case_dir)
    image, spacing = load_nifti(case_dir / "imaging.nii.gz", "image")
    label, _ = load_nifti(case_dir / "segmentation.nii.gz", "segmentation")
    if label.shape != image.shape:
        raise UserError(
            f"{case_dir}: segmentation shape {label.shape} differs from the image's {image.shape}"
        )
    if label.min() < 0 or label.max() >= len(CLASSES):
        raise UserError(
            f"{case_dir}: segmentation labels must be 0..{len(CLASSES) - 1}, found {label.max():g}"
        )
    return image, label.astype(np.uint8), spacing


def resample(image: np.ndarray, label: np.ndarray, spacing, target=TARGET_SPACING):
    """Image (trilinear, corners aligned) and label (nearest) resampled from ``spacing`` to ``target`` mm."""
    import torch
    import torch.nn.functional as F

    if tuple(spacing) == tuple(target):
        return image, label
    shape = (np.array(spacing) / np.array(target) * np.array(image.shape)).astype(int).tolist()
    image = F.interpolate(
        torch.from_numpy(image)[None, None], size=shape, mode="trilinear", align_corners=True
    )
    label = F.interpolate(torch.from_numpy(label)[None, None].float(), size=shape, mode="nearest")
    return image[0, 0].numpy(), label[0, 0].numpy().astype(np.uint8)


def normalize(image: np.ndarray) -> np.ndarray:
    """Clip to CLIP_RANGE (HU), then standardise with the dataset's mean and deviation."""
    return ((np.clip(image, *CLIP_RANGE) - MEAN) / STD).astype(np.float32)


def pad_to(image: np.ndarray, label: np.ndarray, min_shape=MIN_SHAPE):
    """Both edge-padded (evenly on each side) until every side is at least ``min_shape``."""
    extra = [max(0, m - s) for m, s in zip(min_shape, image.shape, strict=True)]
    pads = [(e // 2, e - e // 2) for e in extra]
    return np.pad(image, pads, mode="edge"), np.pad(label, pads, mode="edge")


def preprocess_case(image, label, spacing, min_shape=MIN_SHAPE, target_spacing=TARGET_SPACING):
    """One case as training reads it: float32 [1, D, H, W] image, uint8 [1, D, H, W] label."""
    image, label = resample(image, label, spacing, target_spacing)
    image, label = pad_to(normalize(image), label, min_shape)
    return image[None].astype(np.float32), label[None].astype(np.uint8)


def save_case(data_dir, name: str, image: np.ndarray, label: np.ndarray) -> None:
    """``name_x.npy`` and ``name_y.npy``, each written then renamed."""
    for suffix, array in (("x", image), ("y", label)):
        with atomic_write(pathlib.Path(data_dir) / f"{name}_{suffix}.npy") as tmp:
            with open(tmp, "wb") as f:
                np.save(f, array, allow_pickle=False)


def write_dataset(data_dir, train: list[str], val: list[str], **facts) -> pathlib.Path:
    """``dataset.json``: the training and evaluation cases and how they were prepared."""
    path = pathlib.Path(data_dir) / DATASET_FILE
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps({"train": sorted(train), "val": sorted(val), **facts}, indent=1))
    return path


def compare_with_reference(data_dir, cases, table=REFERENCE_MD5) -> dict:
    """How the prepared npy files of ``cases`` compare with the MLPerf reference's md5 of the same files:
    {"same": N, "different": [file names], "unlisted": N (files the reference does not list)}."""
    reference = json.loads(pathlib.Path(table).read_text())
    result = {"same": 0, "different": [], "unlisted": 0}
    for name in cases:
        for suffix in ("x", "y"):
            file_name = f"{name}_{suffix}.npy"
            if file_name not in reference:
                result["unlisted"] += 1
                continue
            digest = hashlib.md5(usedforsecurity=False)
            with open(pathlib.Path(data_dir) / file_name, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            if digest.hexdigest() == reference[file_name]:
                result["same"] += 1
            else:
                result["different"].append(file_name)
    return result


def raw_cases(raw_dir) -> list[str]:
    """The case folders of ``raw_dir`` (``case_XXXXX`` with an imaging.nii.gz)."""
    raw_dir = pathlib.Path(raw_dir)
    if not raw_dir.is_dir():
        raise UserError(f"KiTS19 folder {raw_dir} not found")
    cases = sorted(p.name for p in raw_dir.glob("case_*") if (p / "imaging.nii.gz").is_file())
    if not cases:
        raise UserError(f"{raw_dir} has no case_XXXXX/imaging.nii.gz folders")
    return cases


def prepare_dataset(raw_dir, data_dir, *, val_cases=None, min_shape=MIN_SHAPE, log=print) -> pathlib.Path:
    """Preprocess every case of ``raw_dir`` into ``data_dir``; ``val_cases`` (names) are held out
    (default: MLPerf's EVAL_CASES). Every case is read and checked before anything is written."""
    cases = raw_cases(raw_dir)
    val_cases = set(val_cases if val_cases is not None else map(case_name, EVAL_CASES))
    loaded = {}
    for name in cases:  # a corrupt file ends the run before data_dir is touched
        loaded[name] = load_case(pathlib.Path(raw_dir) / name)
        if len(cases) > 20:  # KiTS19 in full does not fit in memory: check and prepare one by one
            loaded[name] = None
    data_dir = pathlib.Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in cases:
        image, label, spacing = loaded[name] or load_case(pathlib.Path(raw_dir) / name)
        x, y = preprocess_case(image, label, spacing, min_shape)
        save_case(data_dir, name, x, y)
        log(f"{name}: {image.shape} at {spacing} mm -> {x.shape[1:]}, mean {x.mean():.2f} std {x.std():.2f}")
    train = [c for c in cases if c not in val_cases]
    val = [c for c in cases if c in val_cases]
    reference = compare_with_reference(data_dir, cases)
    if reference["same"] or reference["different"]:
        log(
            f"{reference['same']} of {reference['same'] + len(reference['different'])} files equal the MLPerf "
            "reference's (md5)"
            + (f"; different: {', '.join(reference['different'][:4])}" if reference["different"] else "")
        )
    return write_dataset(
        data_dir, train, val, target_spacing=list(TARGET_SPACING), clip=list(CLIP_RANGE),
        mean=MEAN, std=STD, min_shape=list(min_shape), reference_md5=reference,
    )  # fmt: skip


def read_dataset(data_dir) -> dict:
    """dataset.json of a prepared folder, every listed case's npy pair present."""
    data_dir = pathlib.Path(data_dir)
    path = data_dir / DATASET_FILE
    if not data_dir.is_dir():
        raise UserError(f"data dir {data_dir} not found")
    if not path.is_file():
        raise UserError(f"{data_dir} has no {DATASET_FILE}: prepare it with scripts/download_data.sh")
    try:
        dataset = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON ({e})") from None
    for split in ("train", "val"):
        if not dataset.get(split):
            raise UserError(f"{path} lists no {split} cases")
        missing = [c for c in dataset[split] if not (data_dir / f"{c}_x.npy").is_file()]
        missing += [c for c in dataset[split] if not (data_dir / f"{c}_y.npy").is_file()]
        if missing:
            raise UserError(f"{data_dir} lacks the npy files of {len(missing)} case(s), e.g. {missing[0]}")
    return dataset


def load_npy(path, mmap: bool = True) -> np.ndarray:
    """A prepared volume (memory-mapped); a damaged file is a UserError naming it."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise UserError(f"{path} is not a readable npy file ({str(e).splitlines()[0][:160]})") from None


def load_prepared_case(data_dir, name: str, mmap: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(image [1, D, H, W], label [1, D, H, W]) of a prepared case, shapes checked."""
    data_dir = pathlib.Path(data_dir)
    image = load_npy(data_dir / f"{name}_x.npy", mmap)
    label = load_npy(data_dir / f"{name}_y.npy", mmap)
    if image.ndim != 4 or image.shape != label.shape:
        raise UserError(
            f"{data_dir}/{name}: image {image.shape} and label {label.shape} must both be [1, D, H, W]"
        )
    return image, label
