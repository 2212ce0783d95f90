"""The OpenImages-MLPerf download (the MLPerf class selection, COCO-format json, resumed files, bad files
removed) against an HTTP server on 127.0.0.1, the digits set, and the benchmark's table."""

import functools
import http.server
import json
import threading

import pytest
from PIL import Image
from retinanet.download import main as download_main
from retinanet.openimages import BOX_HEADER, BOXES, CLASS_NAMES, MLPERF_CLASSES

ROWS = {  # ImageID -> (LabelName, XMin, XMax, YMin, YMax, IsGroupOf)
    "validation": [
        ("aaa1", "/m/cat", 0.1, 0.5, 0.2, 0.6, 0),
        ("aaa1", "/m/dog", 0.5, 0.9, 0.1, 0.9, 1),
        ("aaa2", "/m/unlisted", 0.0, 1.0, 0.0, 1.0, 0),  # not an MLPerf class: the image is left out
        ("aaa3", "/m/dog", 0.25, 0.75, 0.25, 0.75, 0),
    ],
    "train": [("bbb1", "/m/cat", 0.0, 0.5, 0.0, 0.5, 0)],
}


@pytest.fixture
def mirror(tmp_path):
    """OpenImages' csv files and images laid out as the two real hosts serve them, on one local server."""
    root = tmp_path / "mirror"
    names = {"Cat": "/m/cat", "Dog": "/m/dog", "Tea": "/m/unlisted-but-named"}
    lines = [f"{mid},{name}" for name, mid in names.items()]
    lines += [f"/m/x{i},{name}" for i, name in enumerate(MLPERF_CLASSES) if name not in names]
    (root / "csv" / CLASS_NAMES).parent.mkdir(parents=True)
    (root / "csv" / CLASS_NAMES).write_text("\n".join(lines) + "\n")
    for split, rows in ROWS.items():
        path = root / "csv" / BOXES[split]
        path.parent.mkdir(parents=True, exist_ok=True)
        body = [
            f"{i},xclick,{label},1,{x1},{x2},{y1},{y2},0,0,{group}"
            for i, label, x1, x2, y1, y2, group in rows
        ]
        path.write_text("\n".join([BOX_HEADER + ",IsDepiction,IsInside", *(b + ",0,0" for b in body)]) + "\n")
        (root / "images" / split).mkdir(parents=True)
        for image_id in {row[0] for row in rows}:
            Image.new("RGB", (200, 100), (90, 40, 10)).save(root / "images" / split / f"{image_id}.jpg")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def download(data, url, *extra):
    download_main(["--data-dir", str(data), "--csv-base-url", f"{url}/csv", "--image-base-url", f"{url}/images",
                   "--workers", "2", *extra])  # fmt: skip


def test_openimages_mlperf_subset_in_coco_format(mirror, tmp_path):
    root, url = mirror
    data = tmp_path / "data"
    download(data, url)
    val = json.loads((data / "annotations" / "instances_validation.json").read_text())
    assert [im["file_name"] for im in val["images"]] == ["aaa1.jpg", "aaa3.jpg"]
    assert len(val["categories"]) == 264 and val["categories"][0]["name"] == "Airplane"
    cat = next(c["id"] for c in val["categories"] if c["name"] == "Cat")
    first = val["annotations"][0]
    assert (
        first["category_id"] == cat
        and first["bbox"] == pytest.approx([20, 20, 80, 40])
        and first["iscrowd"] == 0
    )
    assert val["annotations"][1]["iscrowd"] == 1  # IsGroupOf
    assert (data / "validation" / "aaa3.jpg").is_file() and not (data / "validation" / "aaa2.jpg").exists()
    train = json.loads((data / "annotations" / "instances_train.json").read_text())
    assert len(train["images"]) == 1
    # A second run fetches nothing again; an image that is not a JPEG is removed and named in one line.
    (root / "images" / "validation" / "aaa1.jpg").write_text("<html>not found</html>")
    download(data, url, "--splits", "validation")
    (data / "validation" / "aaa1.jpg").unlink()
    with pytest.raises(SystemExit, match="aaa1.jpg is not a JPEG image"):
        download(data, url, "--splits", "validation")
    assert not (data / "validation" / "aaa1.jpg").exists()


def test_a_file_that_is_not_the_box_csv_is_refused(mirror, tmp_path):
    root, url = mirror
    (root / "csv" / BOXES["validation"]).write_text("<html>moved</html>\n")
    with pytest.raises(SystemExit, match="is not OpenImages' box file"):
        download(tmp_path / "data", url, "--splits", "validation")


def test_digits_set_and_max_images_flag(tmp_path):
    download_main(["--data-dir", str(tmp_path / "d"), "--synthetic", "--synthetic-images", "8"])
    train = json.loads((tmp_path / "d" / "annotations" / "instances_train2017.json").read_text())
    assert len(train["images"]) == 8 and len(train["categories"]) == 10 and train["annotations"]
    with pytest.raises(SystemExit, match="--max-images must be a positive integer"):
        download_main(["--data-dir", str(tmp_path / "d"), "--max-images", "0"])


def test_benchmark_smoke_prints_ours_and_torchvisions_rows(tmp_path, capsys):
    from retinanet.benchmark import main

    from .conftest import MODEL_DIR

    out = tmp_path / "bench.json"
    main(["--smoke", "--device", "cpu", "--recipe", str(MODEL_DIR / "configs" / "digits_cpu.yaml"),
          "--output", str(out)])  # fmt: skip
    table = capsys.readouterr().out
    assert "vs torchvision" in table and table.count("torchvision ") >= 2
    rows = json.loads(out.read_text())["results"]
    assert {(r["model"], r["mode"]) for r in rows} == {
        (m, k) for m in ("ours", "torchvision") for k in ("train", "inference")
    }
    assert all(r["throughput"] > 0 for r in rows)
