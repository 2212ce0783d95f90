"""Organ-like CT volumes made up on the spot: two ellipsoid "kidneys" of soft-tissue intensity in darker
fat, a brighter "tumour" sphere inside one of them, noise on top; labels 0 background, 1 kidney, 2 tumour.

    image, label = organ_volume(np.random.default_rng(0), shape=(48, 48, 48))   # HU-like float32, uint8
    write_nifti_cases(folder, cases=8, shape=(48, 48, 48))     # folder/case_XXXXX/{imaging,segmentation}.nii.gz

``--synthetic`` training prepares such volumes in memory (no download); the tests write them as real
NIfTI files and run them through the same preprocessing as KiTS19.
"""

from __future__ import annotations

import pathlib

import numpy as np

from unet3d.kits19 import case_name, normalize, pad_to


def organ_volume(rng: np.random.Generator, shape=(48, 48, 48)) -> tuple[np.ndarray, np.ndarray]:
    """One volume of HU-like intensities and its label map."""
    grid = np.stack(np.meshgrid(*[np.arange(s, dtype=np.float32) for s in shape], indexing="ij"))
    side = np.array(shape, dtype=np.float32)
    image = np.full(shape, -100.0, dtype=np.float32)  # fat
    label = np.zeros(shape, dtype=np.uint8)
    for kidney in range(2):
        centre = side * np.array([0.5, 0.5, 0.3 + 0.4 * kidney]) + rng.uniform(-0.06, 0.06, 3) * side
        radii = side * rng.uniform([0.18, 0.12, 0.08], [0.26, 0.16, 0.12])
        inside = (((grid - centre[:, None, None, None]) / radii[:, None, None, None]) ** 2).sum(0) <= 1
        image[inside], label[inside] = 40.0, 1
        if kidney == int(rng.integers(2)):
            offset = rng.uniform(-0.4, 0.4, 3) * radii
            radius = radii.min() * rng.uniform(0.45, 0.7)
            tumour = ((grid - (centre + offset)[:, None, None, None]) ** 2).sum(0) <= radius**2
            image[tumour & inside], label[tumour & inside] = 140.0, 2
    image += rng.normal(0.0, 25.0, shape).astype(np.float32)
    return image, label


def synthetic_cases(count: int, shape=(48, 48, 48), min_shape=(32, 32, 32), seed: int = 0) -> dict:
    """{case name: (image [1, D, H, W] normalised, label [1, D, H, W])}, prepared like KiTS19 (no resampling:
    made at the target spacing)."""
    rng = np.random.default_rng(seed)
    cases = {}
    for index in range(count):
        image, label = organ_volume(rng, shape)
        image, label = pad_to(normalize(image), label, min_shape)
        cases[case_name(index)] = (image[None], label[None])
    return cases


def write_nifti_cases(folder, cases: int, shape=(48, 48, 48), spacing=(2.0, 1.5, 1.5), seed: int = 0) -> list:
    """``cases`` organ volumes as KiTS19 case folders of real NIfTI files (gzip), voxels of ``spacing`` mm."""
    import nibabel

    folder = pathlib.Path(folder)
    rng = np.random.default_rng(seed)
    written = []
    for index in range(cases):
        image, label = organ_volume(rng, shape)
        case = folder / case_name(index)
        case.mkdir(parents=True, exist_ok=True)
        affine = np.diag([*spacing, 1.0])
        nibabel.save(nibabel.Nifti1Image(image.astype(np.int16), affine), str(case / "imaging.nii.gz"))
        nibabel.save(nibabel.Nifti1Image(label, affine), str(case / "segmentation.nii.gz"))
        written.append(case)
    return written
