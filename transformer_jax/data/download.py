"""Finding the fra-eng zip: a configured path, the TFDS manual directory, or a verified download.

TFDS's own checksum registry stores one sha256 per URL, but the book's original file is known
only by sha1 (d2l's `DATA_HUB` entry) and the shared copy is a repack with a different sha256.
So downloads are verified here against a small table of known digests of either file.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from absl import logging

DEFAULT_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
ZIP_NAME = "fra-eng.zip"

# Digests of known-good copies of fra-eng.zip, by algorithm.
KNOWN_DIGESTS: dict[str, frozenset[str]] = {
    # The repacked copy in ../shared/data (carries __MACOSX/ entries).
    "sha256": frozenset({"161c93f18da3a7e6df611ed961426613260de8af06ccf8c79c977afe5135ac44"}),
    # The book's original download: d2l.DATA_HUB['fra-eng'] (d2l 0.17).
    "sha1": frozenset({"94646ad1522d915e7b0f9296181140edcf86a4f5"}),
}


class ChecksumMismatchError(ValueError):
    """A file's digest matches none of the accepted digests."""


class DownloadError(OSError):
    """The download failed or was cut short."""


class ZipNotFoundError(FileNotFoundError):
    """No zip at any of the places looked at, and downloading is off or failed."""


def file_digests(path: str | Path) -> dict[str, str]:
    """Hex sha256 and sha1 of a file, read in 1 MiB chunks."""
    hashers = {"sha256": hashlib.sha256(), "sha1": hashlib.sha1()}
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            for hasher in hashers.values():
                hasher.update(chunk)
    return {name: hasher.hexdigest() for name, hasher in hashers.items()}


def verify_checksum(
    path: str | Path, known_digests: dict[str, frozenset[str]] | None = None
) -> dict[str, str]:
    """Returns the file's digests if any matches `known_digests`, else raises.

    Raises:
      ChecksumMismatchError: naming the file, its sha256 and the accepted digests.
    """
    known_digests = KNOWN_DIGESTS if known_digests is None else known_digests
    digests = file_digests(path)
    if any(digests[algo] in accepted for algo, accepted in known_digests.items()):
        return digests
    accepted = {algo: sorted(values) for algo, values in known_digests.items()}
    raise ChecksumMismatchError(
        f"checksum mismatch for {path}: sha256={digests['sha256']} sha1={digests['sha1']}, "
        f"accepted {accepted}. The file was not used. Delete it and retry the download, or "
        "set data.zip_sha256 to the digest of a corpus you trust."
    )


def download(
    url: str,
    destination: str | Path,
    known_digests: dict[str, frozenset[str]] | None = None,
    timeout: float = 60.0,
) -> Path:
    """Downloads `url` to `destination`, verifying its checksum; never leaves a bad file behind.

    The bytes go to `<destination>.incomplete` and are renamed only after the length and the
    checksum are verified, so an interrupted or corrupted download is never mistaken for data.
    """
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".incomplete")
    logging.info("Downloading %s to %s", url, destination)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "wb") as out:
            expected_length = response.headers.get("Content-Length")
            shutil.copyfileobj(response, out, 1 << 20)
        received = partial.stat().st_size
        if expected_length is not None and received != int(expected_length):
            raise DownloadError(
                f"download of {url} truncated: got {received} of {expected_length} bytes; retry."
            )
        verify_checksum(partial, known_digests)
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError) as error:
        partial.unlink(missing_ok=True)
        raise DownloadError(
            f"download of {url} failed ({error}). If this machine is offline, fetch "
            f"{ZIP_NAME} elsewhere and pass its path as "
            f"--config.data.zip_path=/path/to/{ZIP_NAME} (data.zip_path; or put it in the TFDS "
            "manual dir)."
        ) from error
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, destination)
    return destination


def locate_zip(
    *,
    zip_path: str | Path | None,
    manual_dir: str | Path | None,
    download_dir: str | Path,
    url: str | None,
    known_digests: dict[str, frozenset[str]] | None = None,
) -> Path:
    """Finds the corpus zip: `zip_path` if given (a path that is not a file is an error, not a
    reason to look elsewhere), else in order `manual_dir/fra-eng.zip`, an earlier verified
    download in `download_dir`, then a new download from `url` (skipped if `url` is empty).

    Local files are not required to match `known_digests` (a user may supply their own corpus);
    a configured `data.zip_sha256` is enforced by the caller via `known_digests`.

    Raises:
      ZipNotFoundError: naming the missing `zip_path`, or listing every place looked at, and
        how to supply the zip.
    """
    if zip_path:  # given explicitly: used or refused, never replaced by another copy
        given = check_zip_path(zip_path, manual_dir, url)
        if known_digests is not None:
            verify_checksum(given, known_digests)
        return given
    looked = []
    if manual_dir:
        candidate = Path(manual_dir) / ZIP_NAME
        looked.append(f"TFDS manual dir: {candidate}")
        if candidate.is_file():
            if known_digests is not None:
                verify_checksum(candidate, known_digests)
            return candidate
    downloaded = Path(download_dir) / ZIP_NAME
    looked.append(f"previous download: {downloaded}")
    if downloaded.is_file():
        return downloaded
    if url:
        return download(url, downloaded, known_digests)
    raise ZipNotFoundError(
        f"{ZIP_NAME} not found. Looked in: {'; '.join(looked)}. Supply it by one of: pass "
        f"--config.data.zip_path=/path/to/{ZIP_NAME} (data.zip_path); copy it into the TFDS "
        f"manual dir ({manual_dir}); or set data.url (default {DEFAULT_URL}) on a machine with "
        "network access."
    )


def check_zip_path(
    zip_path: str | Path, manual_dir: str | Path | None = None, url: str | None = None
) -> Path:
    """`zip_path` (`~` expanded) if it is a file, else a `ZipNotFoundError` naming it and the
    ways to supply the zip (`manual_dir`, `url`: where an empty zip_path would look)."""
    given = Path(zip_path).expanduser()
    if not given.is_file():
        raise ZipNotFoundError(_not_a_zip(given, manual_dir, url))
    return given


def _not_a_zip(given: Path, manual_dir: str | Path | None, url: str | None) -> str:
    """The message for a `data.zip_path` that is missing or not a file."""
    what = "is a directory, not a file" if given.is_dir() else "does not exist"
    where = "" if given.is_absolute() else f" (a relative path, read from {Path.cwd()})"
    manual = Path(manual_dir or "<data_dir>/downloads/manual") / ZIP_NAME
    then = f", then a download from data.url ({url})" if url else " (data.url='': no download)"
    return (
        f"data.zip_path={given}{where} {what}. Pass the path of {ZIP_NAME} as "
        f"--config.data.zip_path=/path/to/{ZIP_NAME}, or --config.data.zip_path='' to use the "
        f"copy in the TFDS manual dir ({manual}){then}."
    )
