import hashlib
import http.server
import threading

import pytest
from zoo.checkpoints import CheckpointError, atomic_write, download, fetch, load_registry, sha256_file

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves PAYLOAD at /good.bin (with Range), a short body at /truncated.bin, 404 elsewhere."""

    ranges_seen: list = []

    def do_GET(self):
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
    with pytest.raises(CheckpointError, match="closed after"):
        download(f"{server}/truncated.bin", sha256=DIGEST, dest=dest, progress=False)
    assert not dest.exists()


def test_short_file_fails_size_check_and_removes_part(server, tmp_path):
    with pytest.raises(CheckpointError, match=f"expected {len(PAYLOAD)}"):
        download(f"{server}/short.bin", size=len(PAYLOAD), cache_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_wrong_sha256_keeps_good_cached_file(server, tmp_path):
    good = download(f"{server}/good.bin", sha256=DIGEST, cache_dir=tmp_path, progress=False)
    before = good.stat().st_mtime_ns
    with pytest.raises(CheckpointError, match="does not match"):
        download(f"{server}/good.bin", sha256="0" * 64, cache_dir=tmp_path, progress=False)
    assert good.read_bytes() == PAYLOAD and good.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.bin"]


def test_http_error_is_one_line(server, tmp_path):
    with pytest.raises(CheckpointError, match="HTTP 404"):
        download(f"{server}/missing.bin", cache_dir=tmp_path, progress=False)


def test_registry_fetch_and_unknown_name(server, tmp_path):
    registry_file = tmp_path / "checkpoints.yaml"
    registry_file.write_text(
        "checkpoints:\n"
        "  - name: tiny\n"
        f"    url: {server}/good.bin\n"
        f"    sha256: {DIGEST[:8]}\n"
        f"    size: {len(PAYLOAD)}\n"
        "    format: raw\n    framework: none\n    model: Tiny\n"
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
        "checkpoints:\n  - {name: x, url: u, sha256: zz, size: 1, format: f, framework: f, model: m}\n"
    )
    with pytest.raises(CheckpointError, match="not 8 to 64 hex"):
        load_registry(bad)


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
