import functools
import hashlib
import http.server
import io
import tarfile
import threading

import pytest
from transformer import download

SENTENCES = [
    ("one two three", "eins zwei drei"),
    ("four five", "vier fünf"),
    ("six & seven", "sechs & sieben"),
]


def tgz(members: dict) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sgm(lines: list) -> str:
    segs = "\n".join(f'<seg id="{i}">{line.replace("&", "&amp;")}</seg>' for i, line in enumerate(lines, 1))
    return f'<srcset setid="newstest2014">\n<doc docid="x">\n{segs}\n</doc>\n</srcset>\n'


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A local HTTP server with small archives at the WMT paths; ARCHIVES' md5 pinned to them."""
    root = tmp_path / "www"
    en = "\n".join(s for s, _ in SENTENCES) + "\n"
    de = "\n".join(t for _, t in SENTENCES) + "\n"
    archives = []
    for url, md5, members in download.ARCHIVES:
        contents = {}
        for member in members:
            if member.endswith(".sgm"):
                contents[member] = sgm(
                    [s for s, _ in SENTENCES] if ".en." in member else [t for _, t in SENTENCES]
                )
            else:
                contents[member] = en if member.endswith(".en") else de
        data = tgz(contents)
        path = root / url.split("://", 1)[1].split("/", 1)[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        archives.append((url, None if md5 is None else hashlib.md5(data).hexdigest(), members))
    monkeypatch.setattr(download, "ARCHIVES", archives)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


def test_download_prepares_a_data_folder(mirror, tmp_path):
    url, _ = mirror
    out = download.main(["--data-dir", str(tmp_path / "data"), "--mirror", url, "--vocab-size", "80"])
    assert (out / "tokenizer.json").is_file()
    assert (out / "test.en").read_text().splitlines() == [s for s, _ in SENTENCES]
    assert (out / "test.de").read_text().splitlines()[2] == "sechs & sieben"
    assert sorted(p.name for p in out.glob("*.npz")) == ["test.000.npz", "train.000.npz", "valid.000.npz"]
    from transformer.data import Pairs

    assert len(Pairs(out, "train")) == 3 * len(SENTENCES)  # three corpora


def test_finished_archives_are_reused_without_network(mirror, tmp_path):
    url, root = mirror
    data = tmp_path / "data"
    download.main(["--data-dir", str(data), "--mirror", url, "--vocab-size", "80"])
    for archive in root.rglob("*.tgz"):
        archive.unlink()  # the server now answers 404 for every archive
    download.main(["--data-dir", str(data), "--mirror", url, "--vocab-size", "80"])


def test_a_wrong_md5_is_a_one_line_error_and_removes_the_file(mirror, tmp_path):
    url, root = mirror
    test_archive = next(root.rglob("test-full.tgz"))
    test_archive.write_bytes(tgz({"test-full/other.sgm": "x"}))
    with pytest.raises(SystemExit, match="md5 differs"):
        download.main(["--data-dir", str(tmp_path / "data"), "--mirror", url])
    assert not (tmp_path / "data" / "downloads" / "test-full.tgz").exists()


def test_an_unreachable_mirror_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match="error: "):
        download.main(["--data-dir", str(tmp_path / "data"), "--mirror", "http://127.0.0.1:9"])
