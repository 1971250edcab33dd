"""An export's `export.json`: what marks a directory as an export, and the digests of its files.

    manifest["sha256"] = file_digests(output_dir)   # at export, before export.json is written
    check_digests(model_dir, manifest)              # at open: DamagedExportError if changed

Every export (CTranslate2 and StableHLO) writes `export.json`; its presence is what lets
`experiments.export --force` replace a directory (`staging.check_new`). The digests are
sha256 of every file of the export but the manifest, keyed by their path relative to the
export. A file that is missing, cut short or overwritten in place (a model.bin with 2 KB
of noise still loads and translates, silently wrong) is then named when the export is
opened. Hashing is cheap next to loading: a model.bin of a few hundred MB reads in about a
second. Exports written before digests existed have no "sha256" and are not checked.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

MANIFEST = "export.json"
DIGESTS = "sha256"  # manifest key: {relative path: sha256 hex digest}


class DamagedExportError(ValueError):
    """An export directory whose files are missing, unreadable or not what was exported."""


def damaged(model_dir: str | Path, what: str, redo: str) -> DamagedExportError:
    """The error for a damaged export: `what` is wrong, `redo` the command that rewrites it."""
    return DamagedExportError(
        f"{model_dir} is a damaged export ({what}): export it again with `{redo}`."
    )


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of the file at `path`, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def file_digests(export_dir: str | Path) -> dict[str, str]:
    """{path relative to `export_dir`: sha256} for every file in it but the manifest."""
    root = Path(export_dir)
    return {
        path.relative_to(root).as_posix(): file_sha256(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).as_posix() != MANIFEST
    }


def check_digests(model_dir: str | Path, manifest: dict[str, Any], redo: str) -> None:
    """Raises `DamagedExportError` naming the first file of the manifest's digests that is
    missing or whose bytes changed since export; an export without digests passes."""
    digests = manifest.get(DIGESTS)
    if digests is None:  # exported before digests were recorded
        return
    if not isinstance(digests, dict):
        raise damaged(model_dir, f'its {MANIFEST} "{DIGESTS}" is not a table of files', redo)
    for name, want in digests.items():
        path = Path(model_dir) / name
        if not path.is_file():
            raise damaged(model_dir, f"{name} is missing", redo)
        if file_sha256(path) != want:
            what = f"{name} is not the file that was exported: its sha256 differs"
            raise damaged(model_dir, what, redo)
