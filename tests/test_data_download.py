"""Downloads against a local HTTP server: streaming, Range resume after a drop, checksums."""

from __future__ import annotations

import hashlib
import io
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from seqbench.data.download import fetch
from seqbench.data.prepare import prepare
from seqbench.data.registry import DatasetSpec, FileSpec, SourceSpec
from seqbench.data.sources import resolve
from seqbench.errors import DataError

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


class Server:
    """Serves `files`; honours Range unless `no_range`; drops the first `drops[path]` requests."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.drops: dict[str, int] = {}
        self.no_range = False
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                rng = self.headers.get("Range")
                server.requests.append((self.path, rng))
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if rng and not server.no_range:
                    start = int(rng.removeprefix("bytes=").rstrip("-"))
                    if start >= len(body):
                        self.send_response(416)
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                if server.drops.get(self.path, 0) > 0:
                    server.drops[self.path] -= 1
                    self.wfile.write(body[start : start + (len(body) - start) // 3])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body[start:])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_plain_download_verified(server: Server, tmp_path: Path) -> None:
    server.files["/f.bin"] = PAYLOAD
    dest = fetch(f"{server.url}/f.bin", tmp_path / "f.bin", sha(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD and not (tmp_path / "f.bin.part").exists()
    fetch(f"{server.url}/f.bin", dest, sha(PAYLOAD))  # already there: no new request
    assert len(server.requests) == 1


def test_dropped_connection_resumes_with_range(server: Server, tmp_path: Path) -> None:
    server.files["/f.bin"] = PAYLOAD
    server.drops["/f.bin"] = 1
    dest = fetch(f"{server.url}/f.bin", tmp_path / "f.bin", sha(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD
    assert server.requests[0][1] is None
    assert server.requests[1][1] == f"bytes={len(PAYLOAD) // 3}-"


def test_interrupted_download_resumes_on_next_call(server: Server, tmp_path: Path) -> None:
    server.files["/f.bin"] = PAYLOAD
    server.drops["/f.bin"] = 1
    with pytest.raises(DataError, match=r"interrupted after 349,525 bytes.*rerun to resume"):
        fetch(f"{server.url}/f.bin", tmp_path / "f.bin", sha(PAYLOAD), retries=0)
    assert (tmp_path / "f.bin.part").stat().st_size == len(PAYLOAD) // 3
    fetch(f"{server.url}/f.bin", tmp_path / "f.bin", sha(PAYLOAD), retries=0)
    assert (tmp_path / "f.bin").read_bytes() == PAYLOAD
    assert server.requests[-1][1] == f"bytes={len(PAYLOAD) // 3}-"


def test_server_without_range_restarts(server: Server, tmp_path: Path) -> None:
    server.files["/f.bin"] = PAYLOAD
    server.drops["/f.bin"] = 1
    server.no_range = True
    assert fetch(f"{server.url}/f.bin", tmp_path / "f.bin").read_bytes() == PAYLOAD


def test_complete_part_file_is_not_refetched(server: Server, tmp_path: Path) -> None:
    server.files["/f.bin"] = PAYLOAD
    (tmp_path / "f.bin.part").write_bytes(PAYLOAD)
    assert fetch(f"{server.url}/f.bin", tmp_path / "f.bin", sha(PAYLOAD)).read_bytes() == PAYLOAD
    assert server.requests == [("/f.bin", f"bytes={len(PAYLOAD)}-")]


def test_checksum_mismatch(server: Server, tmp_path: Path) -> None:
    server.files["/f.bin"] = PAYLOAD
    with pytest.raises(DataError, match=f"checksum mismatch for {server.url}/f.bin"):
        fetch(f"{server.url}/f.bin", tmp_path / "f.bin", "0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_http_error_and_offline_fail_fast(server: Server, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"HTTP 404.*put nope.bin in --raw-dir"):
        fetch(f"{server.url}/nope.bin", tmp_path / "nope.bin")
    with socket.socket() as s:  # a port with nothing listening: refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/ratings.dat"
    start = time.perf_counter()
    with pytest.raises(DataError) as info:
        fetch(url, tmp_path / "ratings.dat")
    assert time.perf_counter() - start < 5
    message = str(info.value)
    assert url in message and "put ratings.dat in --raw-dir" in message and "\n" not in message


def test_prepare_downloads_and_extracts_archive(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ratings = "".join(f"{u}::{i}::4::{1000 + u * 10 + i}\n" for u in (1, 2) for i in range(1, 6))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("ml-tiny/ratings.dat", ratings)
    server.files["/ml-tiny.zip"] = buf.getvalue()
    url = f"{server.url}/ml-tiny.zip"
    spec = DatasetSpec(
        name="tiny",
        variant="test",
        sources=(
            SourceSpec(
                "movielens",
                (
                    FileSpec(
                        "ratings",
                        "ratings.dat",
                        "ml_dat_ratings",
                        url,
                        None,
                        "ml-tiny.zip",
                        "ml-tiny/ratings.dat",
                    ),
                ),
            ),
        ),
    )
    cache = tmp_path / "cache"
    (tmp_path / "raw").mkdir()  # an empty --raw-dir (a missing one is refused: issue 55)
    source, files = resolve(spec, [tmp_path / "raw"], cache, True, None)
    assert source.name == "movielens"
    assert files["ratings"][1] == cache / "ml-tiny" / "ratings.dat"
    assert files["ratings"][1].read_text() == ratings
    monkeypatch.setattr("seqbench.data.prepare.get_spec", lambda name: spec)
    card = prepare("tiny", [], tmp_path / "data", cache=cache).card
    assert card["stats"]["actions"] == 10 and len(server.requests) == 1
