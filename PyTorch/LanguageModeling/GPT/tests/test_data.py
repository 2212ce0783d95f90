"""C4 download (real file names, resume, gzip check) from a server on 127.0.0.1, preparation, and the
data a run refuses: a corrupt shard, another tokenizer, a sequence longer than the model."""

import functools
import gzip
import http.server
import json
import threading

import numpy as np
import pytest
from gpt import data, download
from zoo.errors import UserError


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with ``Range: bytes=N-`` answered 206 (what a resumed download asks)."""

    ranges: list = []

    def send_head(self):
        wanted = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not wanted or not path or not __import__("os").path.isfile(path):
            return super().send_head()
        start = int(wanted.split("=")[1].split("-")[0])
        body = open(path, "rb").read()  # noqa: SIM115 - small test files
        self.ranges.append((self.path, start))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        import io

        return io.BytesIO(body[start:])

    def log_message(self, *args):
        pass


def c4_file(texts) -> bytes:
    lines = "".join(json.dumps({"text": t, "timestamp": "2019-04-25T12:57:54Z", "url": "https://example.com"}) + "\n"
                    for t in texts)  # fmt: skip
    return gzip.compress(lines.encode("utf-8"), mtime=0)


@pytest.fixture
def mirror(tmp_path):
    """A local server with two C4 en training files and one validation file, at the hub's names."""
    corpus = download.pydoc_documents()
    root = tmp_path / "www" / "en"
    root.mkdir(parents=True)
    files = {
        "c4-train.00000-of-01024.json.gz": c4_file(corpus["train"][:30]),
        "c4-train.00001-of-01024.json.gz": c4_file(corpus["train"][30:60]),
        "c4-validation.00000-of-00008.json.gz": c4_file(corpus["validation"]),
    }
    for name, content in files.items():
        (root / name).write_bytes(content)
    handler = functools.partial(RangeHandler, directory=str(tmp_path / "www"))
    RangeHandler.ranges = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/en", files
    server.shutdown()


def test_c4_is_downloaded_resumed_and_prepared(mirror, tmp_path):
    base_url, files = mirror
    out = tmp_path / "c4"
    part = out / "downloads" / "c4-train.00001-of-01024.json.gz.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(files["c4-train.00001-of-01024.json.gz"][:1000])  # what an interrupted download left
    download.main(
        ["--data-dir", str(out), "--base-url", base_url, "--c4-train-files", "2", "--vocab-size", "400"]
    )
    assert RangeHandler.ranges == [("/en/c4-train.00001-of-01024.json.gz", 1000)]
    assert (out / "downloads" / "c4-train.00001-of-01024.json.gz").read_bytes() == files[
        "c4-train.00001-of-01024.json.gz"
    ]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["vocab_size"] == 400 and meta["source"].startswith("allenai/c4 en: 2 train")
    windows = data.TokenShards(out, "train", 32, verify=True)
    assert len(windows) > 100 and windows.window(3).shape == (33,)
    tokenizer = data.load_tokenizer(out)
    assert len(tokenizer.decode(windows.window(0).tolist()).split()) > 3  # words, not bytes


def test_a_broken_c4_file_is_removed_with_one_line(mirror, tmp_path):
    base_url, files = mirror
    www = tmp_path / "www" / "en" / "c4-validation.00000-of-00008.json.gz"
    www.write_bytes(files["c4-validation.00000-of-00008.json.gz"][:-20])  # cut short on the server
    with pytest.raises(SystemExit, match="not a whole gzip file"):
        download.main(["--data-dir", str(tmp_path / "c4"), "--base-url", base_url, "--vocab-size", "400"])
    assert not (tmp_path / "c4" / "downloads" / "c4-validation.00000-of-00008.json.gz").exists()
    assert not (tmp_path / "c4" / "meta.json").exists()


def test_the_c4_file_names_are_the_hubs():
    assert download.c4_file_names("train", 2)[-1] == "c4-train.00001-of-01024.json.gz"
    assert download.c4_file_names("validation", 8)[-1] == "c4-validation.00007-of-00008.json.gz"
    with pytest.raises(UserError, match="1024 train files"):
        download.c4_file_names("train", 1025)


def test_sampling_is_deterministic_and_independent_of_the_process_count():
    windows = data.SyntheticTokens(100, 8, windows=50)
    one = data.Sampler(windows, seed=3, batch_per_rank=4, accumulation=2, ranks=1)
    two = data.Sampler(windows, seed=3, batch_per_rank=4, accumulation=1, ranks=2)
    for step in (0, 6, 7):  # step 6 crosses into the second epoch
        a = np.concatenate(one.micro_batches(step, 0))
        b = np.concatenate([two.micro_batches(step, 0)[0], two.micro_batches(step, 1)[0]])
        assert np.array_equal(a, b)
    assert not np.array_equal(one.micro_batches(0, 0)[0], one.micro_batches(6, 0)[0])


def copy_of(folder, tmp_path):
    import shutil

    return shutil.copytree(folder, tmp_path / "copy")


def test_a_corrupt_shard_is_one_line(pydoc_data, tmp_path):
    folder = copy_of(pydoc_data, tmp_path)
    shard = folder / "train" / "shard_00000.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(UserError, match="corrupt or truncated shard"):
        data.TokenShards(folder, "train", 64)
    blob = bytearray((folder / "validation" / "shard_00000.bin").read_bytes())
    blob[10] ^= 0xFF
    (folder / "validation" / "shard_00000.bin").write_bytes(bytes(blob))
    with pytest.raises(UserError, match="sha256 differs"):
        data.TokenShards(folder, "validation", 64, verify=True)


def test_another_tokenizer_is_one_line(pydoc_data, tmp_path):
    folder = copy_of(pydoc_data, tmp_path)
    data.train_tokenizer(["another corpus entirely"] * 50, 300, folder / "tokenizer.json")
    with pytest.raises(UserError, match="not the tokenizer the shards"):
        data.check_tokenizer(folder, 1024)
    with pytest.raises(UserError, match="more than the model's 512"):
        data.check_tokenizer(pydoc_data, 512)


def test_a_sequence_longer_than_the_model_is_one_line(pydoc_data, tmp_path):
    from gpt.train import main
    from gpt_testutil import train_args

    with pytest.raises(SystemExit, match="data.seq_len 256 is longer than the model's 128"):
        main(train_args(pydoc_data, tmp_path, "--set", "data.seq_len=256"))
    assert not tmp_path.joinpath("metrics.jsonl").exists()
