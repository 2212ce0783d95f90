"""Get KiTS19 and prepare it: the 210 cases' CT volumes and segmentations downloaded (resumed, checked,
moved into place whole), then preprocessed into the npy folder training reads.

    python -m unet3d.download kits19 --raw-dir /data/kits19 --data-dir /data/kits19_npy
    python -m unet3d.download prepare --raw-dir /data/kits19 --data-dir /data/kits19_npy   # from case folders you have
    python -m unet3d.download synthetic --raw-dir /tmp/organs --data-dir /tmp/organs_npy --cases 16

Where the files come from (the neheller/kits19 repository's starter code): each case's imaging from the
challenge's bucket (``IMAGING_URL``), its segmentation from the repository's data/ folder
(``SEGMENTATION_URL``). Neither publishes checksums: a file counts as whole when it is a gzip stream that
nibabel reads as a 3D volume, and the pair of a case must share one shape.
"""

from __future__ import annotations

import argparse
import pathlib

from zoo.cli import entry_point, parse_args
from zoo.errors import UserError
from zoo.io import download

from unet3d.kits19 import CASES, case_name, load_case, prepare_dataset
from unet3d.synthetic import write_nifti_cases

IMAGING_URL = "https://kits19.sfo2.digitaloceanspaces.com/master_{case:05d}.nii.gz"
SEGMENTATION_URL = "https://github.com/neheller/kits19/raw/master/data/case_{case:05d}/segmentation.nii.gz"
GZIP_MAGIC = b"\x1f\x8b"


def fetch_case(
    case: int, raw_dir, imaging_url=IMAGING_URL, segmentation_url=SEGMENTATION_URL
) -> pathlib.Path:
    """raw_dir/case_XXXXX/{imaging,segmentation}.nii.gz of one case, downloaded unless already whole."""
    folder = pathlib.Path(raw_dir) / case_name(case)
    for file_name, template in (("imaging.nii.gz", imaging_url), ("segmentation.nii.gz", segmentation_url)):
        url = template.format(case=case)
        path = download(url, dest=folder / file_name, progress=False)
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                path.unlink()
                raise UserError(f"{url} did not send a gzip-compressed NIfTI file; nothing kept")
    load_case(folder)  # both volumes readable, one shape
    return folder


def fetch_kits19(raw_dir, cases=range(CASES), log=print, **urls) -> list[pathlib.Path]:
    """Every case of ``cases`` (default all 210), each resumed where a previous run stopped."""
    done = []
    for index, case in enumerate(cases, start=1):
        done.append(fetch_case(case, raw_dir, **urls))
        log(f"[{index}/{len(cases)}] {done[-1]}")
    return done


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m unet3d.download", description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("kits19", "prepare", "synthetic"))
    p.add_argument("--raw-dir", required=True, help="the NIfTI case folders (case_XXXXX/)")
    p.add_argument("--data-dir", required=True, help="the prepared npy folder train.sh reads")
    p.add_argument(
        "--cases", type=int, default=None, help="kits19: the first N cases only; synthetic: how many"
    )
    p.add_argument("--imaging-url", default=IMAGING_URL, help="URL template of a case's imaging ({case})")
    p.add_argument("--segmentation-url", default=SEGMENTATION_URL, help="URL template of a segmentation")
    p.add_argument(
        "--val-cases", default=None, help="comma list of held-out case names (default: MLPerf's 42)"
    )
    p.add_argument(
        "--min-shape", type=int, default=128, help="pad every side to at least this (the patch side)"
    )
    args = parse_args(p, argv)
    if args.cases is not None and args.cases < 1:
        raise UserError(f"--cases must be a positive integer, not {args.cases}")
    val_cases = args.val_cases.split(",") if args.val_cases else None
    if args.what == "kits19":
        cases = range(min(args.cases or CASES, CASES))
        fetch_kits19(
            args.raw_dir, cases, imaging_url=args.imaging_url, segmentation_url=args.segmentation_url
        )
    elif args.what == "synthetic":
        count = args.cases or 16
        write_nifti_cases(args.raw_dir, count)
        val_cases = val_cases or [case_name(i) for i in range(count - max(1, count // 8), count)]
    path = prepare_dataset(args.raw_dir, args.data_dir, val_cases=val_cases, min_shape=(args.min_shape,) * 3)
    print(f"prepared {args.data_dir} ({path.name})")


if __name__ == "__main__":
    main()
