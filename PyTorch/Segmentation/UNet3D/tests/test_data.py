"""KiTS19 preparation and download (against an HTTP server on 127.0.0.1), patches, and bad volumes."""

import functools
import http.server
import json
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import MODEL_DIR
from unet3d.data import PatchLoader, foreground_boxes, load_cases
from unet3d.download import fetch_kits19
from unet3d.kits19 import load_case, read_dataset
from zoo.errors import UserError


def test_prepared_volumes_follow_mlperf(prepared):
    dataset = read_dataset(prepared)
    assert dataset["val"] == ["case_00006", "case_00007"] and len(dataset["train"]) == 6
    assert dataset["target_spacing"] == [1.6, 1.2, 1.2]
    image = np.load(prepared / "case_00000_x.npy")
    label = np.load(prepared / "case_00000_y.npy")
    assert image.shape == label.shape == (1, 40, 40, 40)  # 32 voxels of 2.0 / 1.5 mm -> 1.6 / 1.2 mm
    assert image.dtype == np.float32 and label.dtype == np.uint8
    assert image.min() >= (-79 - 101) / 76.9 - 1e-5 and set(np.unique(label)) <= {0, 1, 2}


def test_patches_are_deterministic_from_any_step_and_oversample_foreground(prepared):
    cases = load_cases(prepared)["train"]
    loader = PatchLoader(cases, (32, 32, 32), batch_size=2, oversampling=1.0, seed=3)
    whole = list(loader.epoch(1))
    resumed = list(loader.epoch(1, start_step=1))
    assert len(whole) == loader.batches_per_epoch == 3
    for (a, b), (c, d) in zip(whole[1:], resumed, strict=True):
        assert (a == c).all() and (b == d).all()
    assert all((labels > 0).flatten(1).any(1).all() for _, labels in whole)  # every patch holds foreground
    label = np.zeros((1, 10, 10, 10), np.uint8)
    label[0, 2:4, 3:7, 5:6] = 2
    label[0, 0, 0, 0] = label[0, 9, 0:3, 0] = label[0, 6:9, 8:10, 8] = (
        1  # three kidney regions: the two largest kept
    )
    assert foreground_boxes(label) == {
        1: [((9, 0, 0), (10, 3, 1)), ((6, 8, 8), (9, 10, 9))],
        2: [((2, 3, 5), (4, 7, 6))],
    }


def serve(folder):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_download_fetches_checks_and_resumes(raw_cases, tmp_path):
    # the bucket's layout (master_XXXXX.nii.gz) and the repository's (case_XXXXX/segmentation.nii.gz)
    site = tmp_path / "site"
    for case in (0, 1):
        (site / "data" / f"case_{case:05d}").mkdir(parents=True)
        shutil.copy(raw_cases / f"case_{case:05d}" / "imaging.nii.gz", site / f"master_{case:05d}.nii.gz")
        shutil.copy(
            raw_cases / f"case_{case:05d}" / "segmentation.nii.gz", site / "data" / f"case_{case:05d}"
        )
    server = serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    urls = {
        "imaging_url": base + "/master_{case:05d}.nii.gz",
        "segmentation_url": base + "/data/case_{case:05d}/segmentation.nii.gz",
    }
    raw = tmp_path / "raw"
    whole = (site / "master_00001.nii.gz").read_bytes()
    (raw / "case_00001").mkdir(parents=True)
    (raw / "case_00001" / "imaging.nii.gz.part").write_bytes(whole[:100])  # a download cut short
    try:
        fetch_kits19(raw, range(2), log=lambda _: None, **urls)
        assert (raw / "case_00001" / "imaging.nii.gz").read_bytes() == whole
        load_case(raw / "case_00000")
        (site / "master_00002.nii.gz").write_text("<html>not found</html>")
        (site / "data" / "case_00002").mkdir()
        with pytest.raises(UserError, match="did not send a gzip-compressed NIfTI"):
            fetch_kits19(raw, [2], log=lambda _: None, **urls)
        assert not (raw / "case_00002" / "imaging.nii.gz").exists()
    finally:
        server.shutdown()


def prepare(raw, out):
    command = [
        sys.executable,
        "-m",
        "unet3d.download",
        "prepare",
        "--raw-dir",
        str(raw),
        "--data-dir",
        str(out),
    ]
    return subprocess.run(command, capture_output=True, text=True, cwd=MODEL_DIR, timeout=120)


@pytest.mark.parametrize("damage", ["corrupt", "shape"])
def test_bad_volumes_end_in_one_line_and_write_nothing(raw_cases, tmp_path, damage):
    raw = tmp_path / "raw"
    shutil.copytree(raw_cases / "case_00000", raw / "case_00000")
    shutil.copytree(raw_cases / "case_00001", raw / "case_00001")
    if damage == "corrupt":
        image = raw / "case_00001" / "imaging.nii.gz"
        image.write_bytes(image.read_bytes()[:300])
        expected = "is not a readable NIfTI file"
    else:
        import nibabel

        nibabel.save(
            nibabel.Nifti1Image(np.zeros((32, 32, 30), np.uint8), np.eye(4)),
            str(raw / "case_00001" / "segmentation.nii.gz"),
        )
        expected = "segmentation shape (32, 32, 30) differs from the image's (32, 32, 32)"
    done = prepare(raw, tmp_path / "out")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert expected in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_dataset_json_names_missing_cases(prepared, tmp_path):
    shutil.copytree(prepared, tmp_path / "copy")
    (tmp_path / "copy" / "case_00003_y.npy").unlink()
    with pytest.raises(UserError, match="lacks the npy files of 1 case"):
        read_dataset(tmp_path / "copy")
    assert json.loads((prepared / "dataset.json").read_text())["clip"] == [-79.0, 304.0]


def test_prepared_files_are_compared_with_the_reference_md5(prepared, tmp_path):
    import hashlib

    from unet3d.kits19 import compare_with_reference

    table = tmp_path / "md5.json"
    digest = hashlib.md5((prepared / "case_00000_x.npy").read_bytes()).hexdigest()
    table.write_text(json.dumps({"case_00000_x.npy": digest, "case_00000_y.npy": "0" * 32}))
    result = compare_with_reference(prepared, ["case_00000", "case_00001"], table)
    assert result == {"same": 1, "different": ["case_00000_y.npy"], "unlisted": 2}
    # the generated cases share KiTS19's names but not its volumes: none of them equals the reference's
    assert json.loads((prepared / "dataset.json").read_text())["reference_md5"]["same"] == 0
