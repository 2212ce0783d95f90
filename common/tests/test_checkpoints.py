import collections
import hashlib
import http.server
import io
import pickle
import re
import tarfile
import threading
import zipfile

import pytest
from zoo.checkpoints import CheckpointError, fetch, load_registry, main
from zoo.io import DownloadError, _format_problem, atomic_write, download, remove_stale_temps, sha256_file

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()
ERROR_PAGE = b"<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head><body>Sign in</body></html>\n"


def _zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("weights.params", PAYLOAD[:1000])
    return buffer.getvalue()


ZIP_PAYLOAD = _zip_bytes()


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves PAYLOAD at /good.bin (with Range), a short body at /truncated.bin, an HTML error page
    with status 200 at /weights.zip and /model.h5 (what a login wall or CDN sends), a real zip at
    /real.zip, 404 elsewhere. ``hits`` counts the requests per path."""

    ranges_seen: list = []
    hits: collections.Counter = collections.Counter()
    served: dict = {}  # {path: bytes} sent whole with status 200 (a file the server itself holds cut)

    def do_GET(self):
        self.hits[self.path] += 1
        if self.path in self.served:
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.served[self.path])))
            self.end_headers()
            self.wfile.write(self.served[self.path])
            return
        if self.path in ("/weights.zip", "/model.h5", "/real.zip"):
            body = ZIP_PAYLOAD if self.path == "/real.zip" else ERROR_PAGE
            self.send_response(200)
            self.send_header("Content-Type", "application/zip" if body is ZIP_PAYLOAD else "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path not in ("/good.bin", "/truncated.bin", "/short.bin"):
            self.send_error(404)
            return
        body = PAYLOAD[: len(PAYLOAD) // 2] if self.path == "/short.bin" else PAYLOAD
        start = 0
        if rng := self.headers.get("Range"):
            self.ranges_seen.append(rng)
            start = int(rng.removeprefix("bytes=").rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if self.path == "/truncated.bin":  # promise everything, send a third, hang up
            self.wfile.write(body[start : len(body) // 3])
            self.close_connection = True
            return
        self.wfile.write(body[start:])

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_good_file_then_cached_without_network(server, tmp_path):
    path = download(
        f"{server}/good.bin", sha256=DIGEST, size=len(PAYLOAD), cache_dir=tmp_path, progress=False
    )
    assert path == tmp_path / "good.bin" and path.read_bytes() == PAYLOAD
    assert not (tmp_path / "good.bin.part").exists()
    # a verified cached file needs no server: an unreachable URL with the same file name still works
    again = download("http://127.0.0.1:9/good.bin", sha256=DIGEST[:8], cache_dir=tmp_path, progress=False)
    assert again == path


def test_resume_from_part(server, tmp_path):
    (tmp_path / "good.bin.part").write_bytes(PAYLOAD[:1000])
    _Handler.ranges_seen.clear()
    path = download(
        f"{server}/good.bin", sha256=DIGEST, size=len(PAYLOAD), cache_dir=tmp_path, progress=False
    )
    assert _Handler.ranges_seen == ["bytes=1000-"]
    assert sha256_file(path) == DIGEST


def test_truncated_transfer_errors_and_leaves_dest_alone(server, tmp_path):
    dest = tmp_path / "model.bin"
    with pytest.raises(DownloadError, match="closed after"):
        download(f"{server}/truncated.bin", sha256=DIGEST, dest=dest, progress=False)
    assert not dest.exists()


def test_short_file_fails_size_check_and_removes_part(server, tmp_path):
    with pytest.raises(DownloadError, match=f"expected {len(PAYLOAD)}"):
        download(f"{server}/short.bin", size=len(PAYLOAD), cache_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_wrong_sha256_keeps_good_cached_file(server, tmp_path):
    good = download(f"{server}/good.bin", sha256=DIGEST, cache_dir=tmp_path, progress=False)
    before = good.stat().st_mtime_ns
    with pytest.raises(DownloadError, match="does not match"):
        download(f"{server}/good.bin", sha256="0" * 64, cache_dir=tmp_path, progress=False)
    assert good.read_bytes() == PAYLOAD and good.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.bin"]


def test_http_error_is_one_line(server, tmp_path):
    with pytest.raises(DownloadError, match="HTTP 404"):
        download(f"{server}/missing.bin", cache_dir=tmp_path, progress=False)


def test_registry_fetch_and_unknown_name(server, tmp_path):
    registry_file = tmp_path / "checkpoints.yaml"
    registry_file.write_text(
        "checkpoints:\n"
        "  - name: tiny\n"
        f"    url: {server}/good.bin\n"
        f"    sha256: {DIGEST[:8]}\n"
        f"    size: {len(PAYLOAD)}\n"
        "    format: zip\n    framework: none\n    model: Tiny\n"
    )
    registry = load_registry(registry_file)
    assert registry.names() == ["tiny"]
    path = fetch(registry.get("tiny"), cache_dir=tmp_path / "cache", progress=False)
    assert path == tmp_path / "cache" / "tiny" / "good.bin" and path.read_bytes() == PAYLOAD
    with pytest.raises(CheckpointError, match=r"unknown checkpoint 'nope' \(known: tiny\)"):
        registry.get("nope")


def test_registry_rejects_bad_entries(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("checkpoints:\n  - name: x\n    url: http://h/x\n")
    with pytest.raises(CheckpointError, match="lacks field"):
        load_registry(bad)
    bad.write_text(
        "checkpoints:\n  - {name: x, url: u, sha256: zz, size: 1, format: zip, framework: f, model: m}\n"
    )
    with pytest.raises(CheckpointError, match="not 8 to 64 hex"):
        load_registry(bad)
    bad.write_text(
        "checkpoints:\n  - {name: x, url: u, sha256: null, size: 1, format: raw, framework: f, model: m}\n"
    )
    with pytest.raises(CheckpointError, match="format 'raw' is not one of pytorch, safetensors, zip"):
        load_registry(bad)
    bad.write_text(
        "checkpoints:\n  - {name: x, url: u, sha256: null, size: -5, format: zip, framework: f, model: m}\n"
    )
    with pytest.raises(CheckpointError, match="size must be a positive number of bytes or null"):
        load_registry(bad)


ENTRY = (
    "  - {name: v2, url: 'http://h/resnet50-11ad3fa6.pth', sha256: 11ad3fa6, size: null, format: pytorch,\n"
)
PREPROCESSING = (
    "resize: 232, crop: 224, interpolation: bilinear, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]"
)


def _registry(tmp_path, extra: str):
    path = tmp_path / "checkpoints.yaml"
    path.write_text("checkpoints:\n" + ENTRY + f"     framework: pytorch, model: resnet50{extra}}}\n")
    return path


def test_registry_reads_preprocessing_and_accuracy(tmp_path):
    path = _registry(
        tmp_path,
        f", preprocessing: {{{PREPROCESSING}}}, accuracy: {{top1: 80.858, top5: 95.434, dataset: imagenet-1k val}}",
    )
    entry = load_registry(path).get("v2")
    assert (entry.preprocessing.resize, entry.preprocessing.crop) == (232, 224)
    assert entry.preprocessing.interpolation == "bilinear"
    assert entry.preprocessing.mean == (0.485, 0.456, 0.406) and entry.preprocessing.std[2] == 0.225
    assert entry.preprocessing.describe().startswith("resize 232, crop 224, bilinear, mean (0.485, 0.456")
    assert entry.accuracy.metrics == {"top1": 80.858, "top5": 95.434}
    assert entry.accuracy.describe() == "top1 80.858 top5 95.434 (imagenet-1k val)"
    plain = load_registry(_registry(tmp_path, "")).get("v2")
    assert plain.preprocessing is None and plain.accuracy is None


@pytest.mark.parametrize(
    "extra, message",
    [
        (", preprocessing: {resize: 200, crop: 224, interpolation: bilinear, mean: [0, 0, 0], std: [1, 1, 1]}",
         "resize 200 is smaller than crop 224"),
        (", preprocessing: {resize: 256, crop: 224, interpolation: lanczos, mean: [0, 0, 0], std: [1, 1, 1]}",
         "interpolation 'lanczos' is not one of nearest, bilinear, bicubic"),
        (", preprocessing: {resize: 256, crop: 224, interpolation: bilinear, mean: [123.7, 116.3, 103.5], "
         "std: [1, 1, 1]}", "mean must be 3 numbers in 0..1"),
        (", preprocessing: {resize: 256, crop: 224, interpolation: bilinear, mean: [0, 0, 0]}", "lacks field"),
        (f", preprocessing: {{{PREPROCESSING}, crop_pct: 0.875}}", "unknown field(s) crop_pct"),
        (", accuracy: {top1: 0.80858, top5: 95.4}", "lacks the dataset"),
        (", accuracy: {top1: 808.58, dataset: imagenet-1k val}", "top1 must be a number in (0, 100]"),
        (", accuracy: {acc: 80.8, dataset: imagenet-1k val}", "unknown field(s) acc"),
    ],
)  # fmt: skip
def test_registry_rejects_bad_preprocessing_and_accuracy(tmp_path, extra, message):
    with pytest.raises(CheckpointError) as error:
        load_registry(_registry(tmp_path, extra))
    assert message in str(error.value) and "checkpoint 'v2'" in str(error.value)


def test_atomic_write_replaces_on_success_and_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "ckpt" / "state.pt"
    with atomic_write(target) as tmp:
        assert tmp.parent == target.parent
        tmp.write_bytes(b"v1")
    assert target.read_bytes() == b"v1"

    with pytest.raises(RuntimeError), atomic_write(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("writer crashed")
    assert target.read_bytes() == b"v1"
    assert [p.name for p in target.parent.iterdir()] == ["state.pt"]

    fresh = tmp_path / "fresh.pt"
    with pytest.raises(RuntimeError), atomic_write(fresh) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("writer crashed")
    assert not fresh.exists() and not list(tmp_path.glob(".fresh.pt*"))


def test_stale_temps_of_a_killed_write_are_removed_and_nothing_else(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    target = tmp_path / "checkpoint.pt"
    target.write_bytes(b"good")
    (tmp_path / "notes.tmp").write_bytes(b"the user's")
    writer = (
        "import sys, time; from zoo.io import atomic_write\n"
        "with atomic_write(sys.argv[1]) as tmp:\n"
        "    tmp.write_bytes(b'half'); print(tmp, flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", writer, str(target)], stdout=subprocess.PIPE, text=True)
    left = proc.stdout.readline().strip()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert os.path.exists(left)  # a kill runs no finally: the temp stays behind
    assert remove_stale_temps(tmp_path) == [tmp_path / os.path.basename(left)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "notes.tmp"]
    assert target.read_bytes() == b"good"
    assert remove_stale_temps(tmp_path / "missing") == []


def test_atomic_write_gives_the_permissions_of_a_plain_write(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        plain = tmp_path / "plain.bin"
        plain.write_bytes(b"x")
        with atomic_write(tmp_path / "atomic.bin") as tmp:
            tmp.write_bytes(b"x")
        mode = stat.S_IMODE((tmp_path / "atomic.bin").stat().st_mode)
        assert mode == stat.S_IMODE(plain.stat().st_mode) == 0o644
    finally:
        os.umask(old)


def _digestless_registry(tmp_path, server, file_name: str, file_format: str):
    path = tmp_path / "checkpoints.yaml"
    path.write_text(
        "checkpoints:\n"
        f"  - {{name: w, url: '{server}/{file_name}', sha256: null, size: null, format: {file_format},"
        " framework: none, model: Tiny}\n"
    )
    return path


@pytest.mark.parametrize("file_name, file_format", [("weights.zip", "zip"), ("model.h5", "hdf5")])
def test_html_page_for_a_digestless_entry_is_refused_and_not_cached(
    server, tmp_path, capsys, file_name, file_format
):
    registry = _digestless_registry(tmp_path, server, file_name, file_format)
    cache = tmp_path / "cache"
    _Handler.hits.clear()
    for attempt in (1, 2):  # a re-run fetches again: nothing bad was kept to be served from the cache
        with pytest.raises(SystemExit) as error:
            main(["--registry", str(registry), "--cache-dir", str(cache), "pull", "w"])
        message = str(error.value)
        assert "\n" not in message and message.startswith("error: ")
        assert (
            f"not {'a zip archive' if file_format == 'zip' else 'an HDF5 file'} but an HTML page" in message
        )
        assert "403 Forbidden" in message and "nothing was written" in message
        assert [p for p in cache.rglob("*") if p.is_file()] == []
        assert _Handler.hits[f"/{file_name}"] == attempt


def test_digestless_entry_of_the_right_format_is_cached(server, tmp_path, capsys):
    registry = _digestless_registry(tmp_path, server, "real.zip", "zip")
    cache = tmp_path / "cache"
    main(["--registry", str(registry), "--cache-dir", str(cache), "pull", "w"])
    path = cache / "w" / "real.zip"
    assert capsys.readouterr().out.strip() == str(path) and path.read_bytes() == ZIP_PAYLOAD
    # a bad file already in the cache (left by an older version) is removed, then fetched again
    path.write_bytes(ERROR_PAGE)
    _Handler.hits.clear()
    main(["--registry", str(registry), "--cache-dir", str(cache), "pull", "w"])
    assert path.read_bytes() == ZIP_PAYLOAD and _Handler.hits["/real.zip"] == 1


def _tar_bytes(mode: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        info = tarfile.TarInfo("saved_model/saved_model.pb")
        info.size = 4
        archive.addfile(info, io.BytesIO(b"\x08\x01\x12\x00"))
    return buffer.getvalue()


def _hdf5_bytes(user_block: int = 0) -> bytes:
    """An HDF5 file's version-0 superblock (after a user block) whose end-of-file address is the file's
    size, padded to that size: what the check reads of a real file."""
    size = user_block + 2048
    undefined = b"\xff" * 8
    superblock = b"\x89HDF\r\n\x1a\n" + bytes([0, 0, 0, 0, 0, 8, 8, 0]) + (4).to_bytes(2, "little")
    superblock += (16).to_bytes(2, "little") + bytes(4) + bytes(8) + undefined
    superblock += size.to_bytes(8, "little") + undefined
    return (bytes(user_block) + superblock).ljust(size, b"\0")


def _mxnet_params_bytes() -> bytes:
    """What ``mx.nd.save(f, {"arg:w": float32 (2, 3), "aux:i": int64 (2,)})`` writes (NDArray V2 records)."""

    def record(shape, dtype_flag, data):
        header = (0xF993FAC9).to_bytes(4, "little") + bytes(4) + len(shape).to_bytes(4, "little")
        header += b"".join(d.to_bytes(8, "little") for d in shape)
        return header + (1).to_bytes(4, "little") + bytes(4) + dtype_flag.to_bytes(4, "little") + data

    arrays = [record((2, 3), 0, bytes(24)), record((2,), 6, bytes(16))]
    names = [b"arg:w", b"aux:i"]
    out = (0x112).to_bytes(8, "little") + bytes(8) + len(arrays).to_bytes(8, "little") + b"".join(arrays)
    out += len(names).to_bytes(8, "little")
    return out + b"".join(len(name).to_bytes(8, "little") + name for name in names)


SAFETENSORS_HEADER = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
SIGNED = {
    "pytorch": [ZIP_PAYLOAD, pickle.dumps({"epoch": 1}, protocol=2)],
    "safetensors": [(len(SAFETENSORS_HEADER)).to_bytes(8, "little") + SAFETENSORS_HEADER + b"\0" * 8],
    "zip": [ZIP_PAYLOAD],
    "hdf5": [_hdf5_bytes(), _hdf5_bytes(user_block=512)],
    "tar": [_tar_bytes("w"), _tar_bytes("w:gz"), _tar_bytes("w:bz2"), _tar_bytes("w:xz")],
    "savedmodel": [_tar_bytes("w:gz"), _tar_bytes("w")],
    "mxnet-params": [_mxnet_params_bytes(), (0x112).to_bytes(8, "little") + bytes(24)],
}


@pytest.mark.parametrize("file_format", sorted(SIGNED))
def test_format_signatures(tmp_path, file_format):
    path = tmp_path / "file"
    for content in SIGNED[file_format]:
        path.write_bytes(content)
        assert _format_problem(path, file_format) is None, content[:16]
    for content, looks in (
        (ERROR_PAGE, "an HTML page"),
        (b"Not Found\n", "text ('Not Found')"),
        (b"", "empty"),
    ):
        path.write_bytes(content)
        assert looks in _format_problem(path, file_format)
    other = SIGNED["mxnet-params" if file_format != "mxnet-params" else "hdf5"][0]
    path.write_bytes(other)
    assert "bytes" in _format_problem(path, file_format)


def test_cli_lists_and_rejects_the_old_spellings(tmp_path, capsys):
    path = _registry(
        tmp_path,
        f", preprocessing: {{{PREPROCESSING}}}, accuracy: {{top1: 80.858, top5: 95.434, dataset: imagenet-1k val}}",
    )
    main(["--registry", str(path), "list"])
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "FORMAT", "SIZE", "ACCURACY", "DESCRIPTION"]
    assert row.split()[:7] == ["v2", "pytorch", "-", "top1", "80.858", "top5", "95.434"]
    prog = ["--prog", "scripts/download_checkpoint.sh"]
    for argv, expected in (
        (["--list"], "error: --list is gone: use 'scripts/download_checkpoint.sh list'"),
        (["v2"], "error: 'v2' is not a command: use 'scripts/download_checkpoint.sh pull v2'"),
        (["pull"], "error: pull needs a checkpoint name"),
        (["pull", "v3"], "error: unknown checkpoint 'v3' (known: v2)"),
    ):
        with pytest.raises(SystemExit) as error:
            main(["--registry", str(path), *prog, *argv])
        assert str(error.value).startswith(expected), error.value


@pytest.mark.parametrize("file_format", sorted(SIGNED))
def test_a_digestless_file_cut_short_is_not_whole(tmp_path, file_format):
    """Without a digest the whole file is read: the first bytes of a good file, cut off, are refused."""
    path = tmp_path / "file"
    # torch.save's pickle of before 1.6 has no end that a reader could check without torch
    for whole in SIGNED[file_format][:1] if file_format == "pytorch" else SIGNED[file_format]:
        path.write_bytes(whole)
        assert _format_problem(path, file_format) is None
        # a plain tar pads its end-of-archive blocks to 10 KiB: cut into the blocks themselves
        plain_tar = whole[257:262] == b"ustar"
        path.write_bytes(whole[: 1024 + 100] if plain_tar else whole[:-7])
        assert re.search(r"cut short|shorter than", _format_problem(path, file_format)), whole[:16]


def test_a_tar_cut_at_a_member_boundary_is_not_whole(tmp_path):
    """A plain tar cut between two members (or inside one's data) still lists as a shorter archive: the
    end-of-archive block is what says it is whole."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for index in range(3):
            info = tarfile.TarInfo(f"variables/variables.data-0000{index}-of-00003")
            info.size = 1000
            archive.addfile(info, io.BytesIO(bytes(1000)))
    whole, path = buffer.getvalue(), tmp_path / "model.tar"
    for cut, members in ((3 * 1536, 3), (2 * 1536, 2)):
        path.write_bytes(whole[:cut])
        problem = _format_problem(path, "tar")
        assert problem == f"a tar archive cut short: no end-of-archive block after its {members} members"
    for cut in (1536 + 700, 1536 + 100):  # inside the second member's data, inside its header
        path.write_bytes(whole[:cut])
        assert _format_problem(path, "tar").startswith("a tar archive cut short")


def test_an_mxnet_params_file_is_walked_to_its_last_byte(tmp_path):
    path, whole = tmp_path / "w.params", _mxnet_params_bytes()
    path.write_bytes(whole + b"\0")
    assert (
        _format_problem(path, "mxnet-params")
        == "an MXNet NDArray file damaged (1 bytes after its last record)"
    )
    path.write_bytes(whole[:40])
    assert "its records run past its 40 bytes" in _format_problem(path, "mxnet-params")
    path.write_bytes(whole[:24] + (0xF993FAC9).to_bytes(4, "little") + (7).to_bytes(4, "little") + whole[32:])
    assert _format_problem(path, "mxnet-params") == "an MXNet NDArray file damaged (storage type 7)"


@pytest.mark.parametrize(
    "file_format, whole, kept",
    [
        ("hdf5", _hdf5_bytes(user_block=512), 1500),
        ("tar", _tar_bytes("w:bz2"), 60),
        ("savedmodel", _tar_bytes("w"), 1024 + 100),  # into the end-of-archive block
        ("mxnet-params", _mxnet_params_bytes(), 100),
    ],
)
def test_a_pull_of_a_file_the_server_holds_cut_is_refused_and_not_cached(
    server, tmp_path, file_format, whole, kept
):
    """The server sends all it has, with a Content-Length that matches: only the file itself shows that
    it is not whole. Nothing lands in the cache, and the next pull asks the server again."""
    file_name = f"cut-{file_format}.bin"
    _Handler.served[f"/{file_name}"] = whole[:kept]
    registry = _digestless_registry(tmp_path, server, file_name, file_format)
    cache = tmp_path / "cache"
    _Handler.hits.clear()
    for attempt in (1, 2):
        with pytest.raises(SystemExit) as error:
            main(["--registry", str(registry), "--cache-dir", str(cache), "pull", "w"])
        message = str(error.value)
        assert "\n" not in message and message.startswith("error: ") and file_name in message
        assert re.search(r"cut short|shorter than", message) and "nothing was written" in message
        assert not cache.exists()  # not even the folders the pull made for it
        assert _Handler.hits[f"/{file_name}"] == attempt
    _Handler.served[f"/{file_name}"] = whole
    main(["--registry", str(registry), "--cache-dir", str(cache), "pull", "w"])
    assert (cache / "w" / file_name).read_bytes() == whole
