import functools
import hashlib
import http.server
import threading
import zipfile

import pytest
import torch
import torchvision
from ssd.data import build_loader, collate
from ssd.model import SSD300
from ssd.shapes import make_shapes_coco
from ssd.train import load_backbone
from zoo.data.coco import Archive, prepare_coco
from zoo.errors import UserError


@pytest.fixture
def http_root(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def make_zip(path, files: dict[str, bytes]):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return hashlib.md5(path.read_bytes()).hexdigest(), path.stat().st_size


def test_prepare_coco_downloads_verifies_and_extracts(http_root, tmp_path):
    root, url = http_root
    md5_v, size_v = make_zip(root / "zips" / "val2017.zip", {"val2017/000001.jpg": b"jpeg"})
    md5_a, size_a = make_zip(root / "annotations" / "ann.zip", {"annotations/instances_val2017.json": b"{}"})
    archives = {
        "val": Archive("val2017.zip", "zips/val2017.zip", md5_v, size_v, ("val2017",)),
        "annotations": Archive("ann.zip", "annotations/ann.zip", md5_a, size_a, ("annotations",)),
    }
    out = tmp_path / "coco"
    prepare_coco(out, ("val",), base_url=url, archives=archives)
    assert (out / "val2017" / "000001.jpg").read_bytes() == b"jpeg"
    assert (out / "annotations" / "instances_val2017.json").is_file()
    assert not list(out.glob(".extract-*"))
    # A second run needs no network.
    prepare_coco(out, ("val",), base_url="http://127.0.0.1:9", archives=archives)

    bad = {**archives, "val": Archive("val2017.zip", "zips/val2017.zip", "0" * 32, size_v, ("val2017",))}
    with pytest.raises(UserError, match="MD5 .* != published"):
        prepare_coco(tmp_path / "coco2", ("val",), base_url=url, archives=bad)
    assert not (tmp_path / "coco2" / "val2017").exists()
    assert not (tmp_path / "coco2" / "zips" / "val2017.zip").exists()


def test_augmented_loader_keeps_boxes_inside_and_labels_valid(tmp_path):
    image_dir, ann = make_shapes_coco(tmp_path, images=6, size=96, seed=3)
    torch.manual_seed(0)
    loader = build_loader(image_dir, ann, train=True, batch_size=3, augment=True, workers=0)
    for batch in loader:
        assert batch.images.shape == (3, 3, 300, 300)
        valid = batch.labels > 0
        assert valid.any()
        b = batch.boxes[valid]
        assert (b >= 0).all() and (b <= 1).all() and (b[:, 2:] > b[:, :2]).all()
        assert set(batch.labels[valid].tolist()) <= {1, 2, 3}
    padded = collate([(torch.zeros(3, 4, 4), torch.rand(0, 4), torch.zeros(0, dtype=torch.int64), 1, (4, 4))])
    assert padded.boxes.shape == (1, 1, 4) and padded.labels.tolist() == [[0]]


def test_backbone_from_registry_checkpoint(http_root, tmp_path, monkeypatch):
    root, url = http_root
    torch.manual_seed(0)
    resnet = torchvision.models.resnet50(weights=None)
    path = root / "resnet50.pth"
    torch.save({"module." + k: v for k, v in resnet.state_dict().items()}, path)  # DDP-style prefix
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    registry = tmp_path / "checkpoints.yaml"
    registry.write_text(
        "checkpoints:\n"
        f"  - {{name: rn50-test, url: '{url}/resnet50.pth', sha256: {digest}, size: {path.stat().st_size},"
        " format: pytorch, framework: pytorch, model: resnet50}\n"
    )
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    model = SSD300(num_classes=3)
    load_backbone(model, "rn50-test", str(registry))
    torch.testing.assert_close(model.backbone.layer3[5].conv3.weight, resnet.layer3[5].conv3.weight)
    torch.testing.assert_close(model.backbone.bn1.running_var, resnet.bn1.running_var)
    with pytest.raises(UserError, match="rn50-test"):
        load_backbone(model, "no-such-name", str(registry))
    torch.save({"fc.weight": torch.zeros(3)}, tmp_path / "wrong.pth")
    with pytest.raises(UserError, match="not a ResNet-50 state dict"):
        load_backbone(model, str(tmp_path / "wrong.pth"), str(registry))


def test_backbone_registry_is_this_models_own():
    from pathlib import Path

    from ssd.train import DEFAULT_REGISTRY
    from zoo.checkpoints import load_registry

    model_dir = Path(__file__).resolve().parents[1]
    assert DEFAULT_REGISTRY == model_dir / "checkpoints.yaml"
    entry = load_registry(DEFAULT_REGISTRY).get("resnet50-torchvision-v1")
    assert entry.url.endswith("resnet50-0676ba61.pth") and entry.sha256 == "0676ba61"
    assert (entry.format, entry.preprocessing.resize, entry.preprocessing.crop) == ("pytorch", 256, 224)
    readers_of_other_models = [
        p.name for p in (model_dir / "ssd").rglob("*.py") if "Classification" in p.read_text()
    ]
    assert not readers_of_other_models


def test_dali_cpu_pipeline_matches_pytorch_reader(tmp_path):
    pytest.importorskip("nvidia.dali")
    import json

    from ssd.data import DaliLoader

    image_dir, ann = make_shapes_coco(tmp_path, images=6, size=96, seed=2)
    data = json.loads(ann.read_text())
    remap = {1: 5, 2: 9, 3: 12}  # non-contiguous category ids, as in COCO
    for c in data["categories"]:
        c["id"] = remap[c["id"]]
    for a in data["annotations"]:
        a["category_id"] = remap[a["category_id"]]
    ann.write_text(json.dumps(data))
    ref = {}
    for b in build_loader(image_dir, ann, train=False, batch_size=3, workers=0):
        for i, image_id in enumerate(b.image_ids.tolist()):
            ref[image_id] = (b.images[i], b.boxes[i][b.labels[i] > 0], b.labels[i][b.labels[i] > 0])
    seen = set()
    for b in DaliLoader(image_dir, ann, batch_size=3, train=False, device="cpu", workers=1):
        for i, image_id in enumerate(b.image_ids.tolist()):
            image, boxes, labels = ref[image_id]
            keep = b.labels[i] > 0
            assert b.labels[i][keep].tolist() == labels.tolist()
            torch.testing.assert_close(b.boxes[i][keep], boxes, atol=1e-5, rtol=0)
            assert (b.images[i] - image).abs().mean() < 0.01  # resize filters differ slightly
            seen.add(image_id)
    assert seen == set(ref)
    train = DaliLoader(image_dir, ann, batch_size=3, train=True, device="cpu", workers=1, seed=1)
    batch = next(iter(train))
    valid = batch.labels > 0
    assert batch.images.shape == (3, 3, 300, 300) and valid.any()
    assert (batch.boxes[valid] >= 0).all() and (batch.boxes[valid] <= 1).all()
