import json
import os

from zoo.manifest import MANIFEST_NAME, DataManifest


def test_an_entry_is_trusted_until_its_file_changes(tmp_path):
    shard = tmp_path / "train-00000-of-00001"
    shard.write_bytes(b"records")
    manifest = DataManifest.read(tmp_path)
    assert manifest.lookup(shard) is None  # no manifest yet
    manifest.record(shard, records=3, labels=[0, 9])
    manifest.write()
    again = DataManifest.read(tmp_path)
    assert again.lookup(shard) == {**again.files["train-00000-of-00001"], "records": 3, "labels": [0, 9]}
    assert again.lookup(shard)["size"] == 7
    shard.write_bytes(b"record")  # truncated: another size
    assert DataManifest.read(tmp_path).lookup(shard) is None
    manifest.record(shard, records=2)
    manifest.write()
    stat = shard.stat()
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # same size, rewritten later
    assert DataManifest.read(tmp_path).lookup(shard) is None
    assert DataManifest.read(tmp_path).lookup(tmp_path / "missing") is None
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_an_unreadable_manifest_is_an_empty_one(tmp_path):
    (tmp_path / "a.rec").write_bytes(b"x")
    for text in ("{not json", json.dumps({"files": ["a.rec"]}), json.dumps([1])):
        (tmp_path / MANIFEST_NAME).write_text(text)
        assert DataManifest.read(tmp_path).lookup(tmp_path / "a.rec") is None


def test_a_symbolic_link_is_an_entry_of_its_folder(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "train.rec").write_bytes(b"records")
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.rec").symlink_to(tmp_path / "elsewhere" / "train.rec")
    manifest = DataManifest(data)
    manifest.record(data / "train.rec", records=1)
    manifest.write()
    assert list(DataManifest.read(data).files) == ["train.rec"]
    assert DataManifest.read(data).lookup(data / "train.rec")["records"] == 1
