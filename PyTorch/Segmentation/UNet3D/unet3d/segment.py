"""Segment a CT volume: a NIfTI in, a label NIfTI (0 background, 1 kidney, 2 tumour) of the same grid out,
and a PNG of slices with the labels drawn over the image.

    python -m unet3d.segment --checkpoint results/checkpoint.pt imaging.nii.gz --output case_seg.nii.gz

The volume is prepared as for training (resampled to 1.6 x 1.2 x 1.2 mm, clipped, normalised), segmented
by the sliding-window inference of evaluation, and the labels resampled back (nearest) to the input's grid
and saved with its affine.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np
import zoo.cli
from zoo.cli import entry_point
from zoo.io import atomic_write
from zoo.recipe import run_config

from unet3d import DEFAULT_RECIPE
from unet3d.kits19 import TARGET_SPACING, load_nifti, normalize, resample

COLOURS = {1: (0.1, 0.8, 0.2), 2: (0.9, 0.2, 0.1)}  # kidney green, tumour red


def segment_file(
    model, path, patch, precision: str, device, overlap: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """(image as read, labels on the image's grid, uint8) of the NIfTI file ``path``."""
    import torch
    import torch.nn.functional as F

    from unet3d.inference import segment_volume

    image, spacing = load_nifti(path, "image")
    prepared, _ = resample(image, np.zeros(image.shape, np.uint8), spacing, TARGET_SPACING)
    volume = torch.from_numpy(normalize(prepared))[None, None].to(device)
    logits = segment_volume(model, volume, patch, precision, overlap=overlap)
    labels = logits.argmax(1, keepdim=True).float()
    labels = F.interpolate(labels, size=image.shape, mode="nearest")[0, 0]
    return image, labels.to(torch.uint8).cpu().numpy()


def save_labels(labels: np.ndarray, reference, output) -> pathlib.Path:
    """``labels`` as a NIfTI with the affine and header of the NIfTI file ``reference``."""
    import nibabel

    source = nibabel.load(str(reference))
    out = nibabel.Nifti1Image(labels, source.affine, source.header)
    out.set_data_dtype(np.uint8)
    output = pathlib.Path(output)
    with atomic_write(output) as tmp:
        # nibabel picks the compression from the name: the temporary keeps the output's suffix
        named = tmp.with_name(tmp.name + "".join(output.suffixes))
        nibabel.save(out, str(named))
        named.replace(tmp)
    return output


def draw_slices(image: np.ndarray, labels: np.ndarray, output, count: int = 4) -> pathlib.Path:
    """A PNG of ``count`` slices along the first axis through the labelled region, labels drawn over it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = np.flatnonzero(labels.reshape(labels.shape[0], -1).any(1))
    low, high = (found[0], found[-1]) if found.size else (0, labels.shape[0] - 1)
    picks = np.linspace(low, high, count + 2)[1:-1].round().astype(int)
    figure, axes = plt.subplots(1, count, figsize=(3 * count, 3.2))
    for axis, index in zip(np.atleast_1d(axes), picks, strict=True):
        axis.imshow(np.clip(image[index], -79, 304), cmap="gray")
        overlay = np.zeros((*labels.shape[1:], 4))
        for cls, colour in COLOURS.items():
            overlay[labels[index] == cls] = (*colour, 0.45)
        axis.imshow(overlay)
        axis.set_title(f"slice {index}")
        axis.axis("off")
    figure.suptitle("kidney (green), tumour (red)")
    output = pathlib.Path(output)
    with atomic_write(output) as tmp:
        figure.savefig(tmp, format="png", dpi=80, bbox_inches="tight")
    plt.close(figure)
    return output


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m unet3d.segment", description=__doc__.split("\n")[0])
    zoo.cli.add_run_args(p, default_recipe=DEFAULT_RECIPE, resume=False, data_dir=False, results_dir=False)
    p.add_argument("image", help="a CT volume as NIfTI (.nii or .nii.gz)")
    p.add_argument("--checkpoint", default=None, help="training checkpoint or weights file")
    p.add_argument("--pretrained", default=None, help="a registry name (checkpoints.yaml) instead of a file")
    p.add_argument("--output", default=None, help="label NIfTI to write (default: <image>_seg.nii.gz)")
    p.add_argument("--png", default=None, help="PNG of slices to write (default: beside --output)")
    p.add_argument("--device", default=None, help="cuda / cpu (default: cuda if available)")
    args = zoo.cli.parse_args(p, argv)

    import torch

    from unet3d.checkpoints import trained_model
    from unet3d.step import patch_shape

    recipe = zoo.cli.recipe_from_args(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, recipe = trained_model(recipe, args.checkpoint, args.pretrained)
    stem = pathlib.Path(args.image).name.removesuffix(".gz").removesuffix(".nii")
    output = pathlib.Path(args.output or pathlib.Path(args.image).with_name(f"{stem}_seg.nii.gz"))
    image, labels = segment_file(
        model.to(device), args.image, patch_shape(recipe), run_config(recipe).precision, device,
        float(recipe["eval"]["overlap"]),
    )  # fmt: skip
    save_labels(labels, args.image, output)
    png = draw_slices(image, labels, args.png or output.with_name(output.name.split(".")[0] + ".png"))
    counts = np.bincount(labels.ravel(), minlength=3)
    print(f"wrote {output} (kidney {counts[1]} voxels, tumour {counts[2]} voxels) and {png}")


if __name__ == "__main__":
    main()
