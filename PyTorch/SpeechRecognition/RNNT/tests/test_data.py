"""LibriSpeech download from a local mirror (MD5 checked), manifests, one-line errors for corrupt audio
and missing transcripts, bucketed batches."""

import functools
import hashlib
import http.server
import io
import tarfile
import threading

import numpy as np
import pytest
import soundfile
from rnnt import download
from rnnt.data import Utterances, epoch_batches, load_tokenizer, read_manifest
from zoo.errors import UserError

TEXTS = {"19-198-0000": "NORTHANGER ABBEY", "19-198-0001": "THIS LITTLE WORK WAS FINISHED"}


def flac_bytes(seconds: float, seed: int) -> bytes:
    samples = 0.1 * np.random.default_rng(seed).standard_normal(int(16000 * seconds)).astype(np.float32)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, 16000, format="FLAC")
    return buffer.getvalue()


def librispeech_tgz(split: str) -> bytes:
    folder = f"LibriSpeech/{split}/19/198"
    members = {f"{folder}/{name}.flac": flac_bytes(1.0 + i, i) for i, name in enumerate(TEXTS)}
    members[f"{folder}/19-198.trans.txt"] = "".join(f"{k} {v}\n" for k, v in TEXTS.items()).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A local HTTP server holding dev-clean.tar.gz; ARCHIVES' MD5 pinned to it."""
    root = tmp_path / "www"
    root.mkdir()
    data = librispeech_tgz("dev-clean")
    (root / "dev-clean.tar.gz").write_bytes(data)
    monkeypatch.setitem(download.ARCHIVES, "dev-clean", hashlib.md5(data).hexdigest())
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_download_verifies_extracts_and_lists_a_split(mirror, tmp_path):
    data = tmp_path / "data"
    download.main(["--data-dir", str(data), "--splits", "dev-clean", "--mirror", mirror])
    entries = read_manifest(data, "dev-clean")
    assert [e["text"] for e in entries] == ["northanger abbey", "this little work was finished"]
    assert [round(e["duration"], 2) for e in entries] == [1.0, 2.0]
    assert (data / entries[0]["audio"]).is_file()
    assert not (data / "archives").exists()
    # a second run finds the split in place and fetches nothing
    download.main(["--data-dir", str(data), "--splits", "dev-clean", "--mirror", "http://127.0.0.1:9/"])


def test_a_wrong_md5_removes_the_archive_and_says_so(mirror, tmp_path, monkeypatch):
    monkeypatch.setitem(download.ARCHIVES, "dev-clean", "0" * 32)
    with pytest.raises(SystemExit, match="MD5 .* openslr publishes 0{32}"):
        download.main(["--data-dir", str(tmp_path), "--splits", "dev-clean", "--mirror", mirror])
    assert not (tmp_path / "archives" / "dev-clean.tar.gz").exists()
    assert not (tmp_path / "LibriSpeech").exists()


def test_tokenizer_is_trained_on_the_training_transcripts(tmp_path):
    folder = tmp_path / "LibriSpeech" / "train-clean-100" / "19" / "198"
    folder.mkdir(parents=True)
    for i, name in enumerate(TEXTS):
        (folder / f"{name}.flac").write_bytes(flac_bytes(0.5, i))
    (folder / "19-198.trans.txt").write_text("".join(f"{k} {v}\n" for k, v in TEXTS.items()))
    download.prepare(
        tmp_path,
        ["train-clean-100"],
        train_splits=["train-clean-100"],
        vocab_size=20,
        tokenizer="sp.model",
        mirror=None,
    )
    tokenizer = load_tokenizer(tmp_path / "sp.model")
    assert tokenizer.decode(tokenizer.encode("this little abbey")) == "this little abbey"


def spoken_copy(tmp_path, name="1-1.trans.txt"):
    folder = tmp_path / "LibriSpeech" / "dev" / "1" / "1"
    folder.mkdir(parents=True)
    (folder / "1-1-0000.flac").write_bytes(flac_bytes(0.5, 0))
    (folder / name).write_text("1-1-0000 ONE TWO\n")
    return folder


def test_corrupt_audio_is_a_one_line_error(tmp_path):
    folder = spoken_copy(tmp_path)
    (folder / "1-1-0000.flac").write_bytes(b"fLaC but not really")
    with pytest.raises(UserError, match="1-1-0000.flac: cannot decode audio"):
        download.write_manifest(tmp_path, "dev")


def test_missing_transcript_is_a_one_line_error(tmp_path):
    folder = spoken_copy(tmp_path)
    (folder / "1-1-0001.flac").write_bytes(flac_bytes(0.5, 1))
    with pytest.raises(UserError, match="1-1-0001.flac has no transcript line"):
        download.write_manifest(tmp_path, "dev")
    (folder / "1-1-0001.flac").unlink()
    (folder / "1-1.trans.txt").write_text("1-1-0000 ONE TWO\n1-1-0002 THREE\n")
    with pytest.raises(UserError, match="lists 1-1-0002, but .*1-1-0002.flac is missing"):
        download.write_manifest(tmp_path, "dev")


def test_audio_broken_after_listing_fails_in_one_line_when_read(tmp_path):
    folder = spoken_copy(tmp_path)
    download.write_manifest(tmp_path, "dev")
    (folder / "1-1-0000.flac").write_bytes(b"\0" * 100)

    class Letters:
        def encode(self, text):
            return [ord(c) % 7 for c in text]

    with pytest.raises(UserError, match="cannot decode audio"):
        Utterances(tmp_path, ["dev"], Letters()).load(0)


def test_batches_are_bucketed_and_the_same_for_the_same_epoch():
    durations = np.arange(40, dtype=float)
    first = epoch_batches(durations, 5, seed=1, epoch=1, num_buckets=4)
    assert first == epoch_batches(durations, 5, seed=1, epoch=1, num_buckets=4)
    assert first != epoch_batches(durations, 5, seed=1, epoch=2, num_buckets=4)
    assert len(first) == 8 and sorted(i for batch in first for i in batch) == list(range(40))
    for batch in first:  # a batch comes from one bucket of 10 neighbouring durations
        assert max(batch) - min(batch) < 10
    assert len(epoch_batches(np.arange(41.0), 4, seed=1, epoch=1)) == 10  # the partial batch is dropped
