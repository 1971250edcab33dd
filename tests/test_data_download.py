"""The download path against a loopback HTTP server: success, wrong checksum, truncation."""

import hashlib
import http.server
import threading

import pytest

from transformer_jax.data import corpus, datasets, download

pytest_plugins = ["tests.conftest_data"]


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves `server.files[path]`; a (body, declared_length) pair simulates a cut connection."""

    def do_GET(self):  # noqa: N802 (http.server API)
        entry = self.server.files.get(self.path)
        if entry is None:
            self.send_error(404)
            return
        body, declared = entry if isinstance(entry, tuple) else (entry, len(entry))
        self.send_response(200)
        self.send_header("Content-Length", str(declared))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.files = {}
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _url(server, path):
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def _digests_of(data: bytes):
    return {"sha256": frozenset({hashlib.sha256(data).hexdigest()})}


def test_download_success_builds_dataset(tmp_path, server, small_zip, make_cfg):
    data = small_zip.read_bytes()
    server.files["/fra-eng.zip"] = data
    cfg = make_cfg(
        "", url=_url(server, "/fra-eng.zip"), zip_sha256=hashlib.sha256(data).hexdigest()
    )
    assert len(datasets.load_split_pairs(cfg, "full")) == 180
    saved = tmp_path / "tfds" / "downloads" / "fra-eng.zip"
    assert saved.read_bytes() == data
    assert not list(saved.parent.glob("*.incomplete"))


def test_real_zip_is_accepted_by_known_digests(tmp_path, server):
    from transformer_jax.data.config import SHARED_ZIP

    if not SHARED_ZIP.is_file():
        pytest.skip(f"real corpus not found at {SHARED_ZIP}")
    server.files["/fra-eng.zip"] = SHARED_ZIP.read_bytes()
    # Default digests: the known sha256 of the shared copy (or the book's sha1).
    path = download.download(_url(server, "/fra-eng.zip"), tmp_path / "fra-eng.zip")
    assert download.file_digests(path)["sha256"] in download.KNOWN_DIGESTS["sha256"]


def test_wrong_checksum_is_an_error_and_file_is_not_kept(tmp_path, server, small_zip, make_cfg):
    server.files["/fra-eng.zip"] = small_zip.read_bytes()
    # No data.zip_sha256: a download must match the known digests of the d2l file, and the
    # small zip does not.
    cfg = make_cfg("", url=_url(server, "/fra-eng.zip"))
    with pytest.raises(download.ChecksumMismatchError) as info:
        datasets.load_split_pairs(cfg, "train")
    message = str(info.value)
    assert hashlib.sha256(small_zip.read_bytes()).hexdigest() in message
    assert "161c93f18da3a7e6df611ed961426613260de8af06ccf8c79c977afe5135ac44" in message
    assert "not used" in message
    downloads = tmp_path / "tfds" / "downloads"
    assert not list(downloads.glob("fra-eng.zip*"))


def test_connection_cut_short_is_an_error(tmp_path, server, small_zip):
    data = small_zip.read_bytes()
    server.files["/cut.zip"] = (data[: len(data) // 2], len(data))
    target = tmp_path / "dl" / "f.zip"
    with pytest.raises(download.DownloadError, match="cut.zip"):
        download.download(_url(server, "/cut.zip"), target, _digests_of(data))
    assert not list(target.parent.iterdir())  # neither the file nor a partial one


def test_truncated_zip_with_matching_digest_is_rejected_as_corrupt(tmp_path, server, make_zip):
    # A server that serves a truncated archive *consistently* (its digest pinned by the user):
    # the checksum passes, the zip check must still refuse it.
    good = make_zip(tmp_path / "good.zip", ["Go.\tVa !"] * 200)
    truncated = good.read_bytes()[: good.stat().st_size * 2 // 3]
    server.files["/t.zip"] = truncated
    path = download.download(
        _url(server, "/t.zip"), tmp_path / "d" / "t.zip", _digests_of(truncated)
    )
    with pytest.raises(corpus.CorruptArchiveError, match="truncated"):
        list(corpus.read_pairs(path))


def test_http_error_is_a_download_error_with_advice(tmp_path, server):
    with pytest.raises(download.DownloadError, match=r"404.*data.zip_path"):
        download.download(_url(server, "/missing.zip"), tmp_path / "f.zip")


def test_checksum_accepts_sha1_of_the_book(tmp_path):
    data = b"pretend this is the book's zip"
    path = tmp_path / "f.zip"
    path.write_bytes(data)
    known = {"sha1": frozenset({hashlib.sha1(data).hexdigest()}), "sha256": frozenset()}
    assert download.verify_checksum(path, known)["sha1"] == hashlib.sha1(data).hexdigest()
