"""Get data into TFRecords: ImageNet from the tarballs you downloaded (the licence means the zoo cannot
fetch them), or the small digits set (scikit-learn's 8x8 digits upscaled) for a CPU try-out.

    python -m resnet50_tf.prepare_data --train-tar ILSVRC2012_img_train.tar --val-tar ILSVRC2012_img_val.tar \
        --devkit ILSVRC2012_devkit_t12.tar.gz --data-dir /data/imagenet
    python -m resnet50_tf.prepare_data --digits --data-dir /tmp/digits
    python -m resnet50_tf.prepare_data --verify --data-dir /data/imagenet    # TFRecords made elsewhere

--data-dir gets the TFRecords (what train.sh, evaluate.sh and deploy_triton.sh --data-dir read) and,
under --folders-dir (default DATA_DIR/folders), the image folders train/<wnid>/ and val/<wnid>/.
The conversion reads every record back, decodes it and writes manifest.json; --verify alone does that
for shards made elsewhere, so that runs skip their own decode pass. Synthetic data needs nothing: pass
--synthetic to train.sh or benchmark.sh.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from zoo.cli import entry_point, parse_args


@entry_point
def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="download_data.sh",
        description="ImageNet tarballs (verified, laid out, converted) or the digits set -> TFRecords.",
    )
    p.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR"),
        help="output: the TFRecord folder that train.sh --data-dir reads ($DATA_DIR)",
    )
    p.add_argument("--folders-dir", help="the image folders train/ and val/ (default: DATA_DIR/folders)")
    p.add_argument("--synthetic", action="store_true", help="nothing to download: say so and exit")
    p.add_argument("--digits", action="store_true", help="the small digits set instead of ImageNet")
    p.add_argument("--image-size", type=int, default=32, help="digits image size")
    p.add_argument("--train-tar", help="ILSVRC2012_img_train.tar")
    p.add_argument("--val-tar", help="ILSVRC2012_img_val.tar")
    p.add_argument("--devkit", help="ILSVRC2012_devkit_t12.tar.gz (validation labels)")
    p.add_argument("--md5", action="store_true", help="check the official md5 of each tarball (slow)")
    p.add_argument("--train-shards", type=int, default=1024)
    p.add_argument("--val-shards", type=int, default=128)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--verify",
        action="store_true",
        help="alone: read and decode every record of DATA_DIR's shards once and write manifest.json, which "
        "runs trust (a conversion does this too)",
    )
    args = parse_args(p, argv, renamed={"--out": "--data-dir"})
    for flag in ("image_size", "train_shards", "val_shards", "workers"):
        if getattr(args, flag) < 1:
            raise SystemExit(
                f"error: --{flag.replace('_', '-')} must be a positive integer, not {getattr(args, flag)}"
            )
    if args.synthetic:
        print("synthetic data needs no download: pass --synthetic to train.sh or benchmark.sh")
        return
    if not args.data_dir:
        p.error("--data-dir (or $DATA_DIR) is required")
    out = Path(args.data_dir)
    if args.verify and not (args.digits or args.train_tar or args.val_tar or args.devkit):
        from resnet50_tf.tfrecords import verify_dataset

        info = verify_dataset(out)
        print(f"{out}: every record of {len(info.classes)} classes reads and decodes; manifest.json written")
        return
    folders = Path(args.folders_dir) if args.folders_dir else out / "folders"
    if args.digits:
        from zoo.data.datasets import make_digits_imagefolder

        make_digits_imagefolder(folders, image_size=args.image_size)
        shards = (4, 2)
    else:
        missing = [
            f"--{n}" for n in ("train-tar", "val-tar", "devkit") if not getattr(args, n.replace("-", "_"))
        ]
        if missing:
            p.error(f"ImageNet needs {' '.join(missing)} (or pass --digits)")
        from zoo.data.imagenet import prepare_imagenet

        prepare_imagenet(args.train_tar, args.val_tar, args.devkit, folders, verify_md5=args.md5)
        shards = (args.train_shards, args.val_shards)
    from resnet50_tf.convert_tfrecords import convert

    info = convert(folders, out, shards[0], shards[1], args.workers)
    print(
        f"{out}: {info['train_examples']} train, {info['validation_examples']} validation images, "
        f"{len(info['classes'])} classes"
    )


if __name__ == "__main__":
    main()
