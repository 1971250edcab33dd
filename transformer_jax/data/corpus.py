"""Reading the fra-eng archive: `fra-eng/fra.txt` inside a zip, malformed lines counted.

The file is the manythings.org/anki export of Tatoeba used by d2l: one `english<TAB>french`
pair per line. Newer exports carry a third attribution column, which is ignored.
"""

from __future__ import annotations

import collections
import dataclasses
import zipfile
from collections.abc import Iterator
from pathlib import Path

MEMBER_NAME = "fra.txt"

# Reasons a line is skipped; each is counted and reported in the build log.
MALFORMED_REASONS = ("bad_utf8", "no_tab", "empty_side")


class CorruptArchiveError(ValueError):
    """The zip cannot be read or does not contain `fra-eng/fra.txt`."""


@dataclasses.dataclass
class CorpusLine:
    """One well-formed line: its 0-based line number in fra.txt and the raw (unprocessed) sides."""

    line_number: int
    english: str
    french: str


@dataclasses.dataclass
class ReadReport:
    """What `read_pairs` saw: counts of kept lines and of skipped lines by reason."""

    kept: int = 0
    blank: int = 0
    malformed: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    examples: list[str] = dataclasses.field(default_factory=list)  # first few bad lines

    def as_dict(self) -> dict:
        return {
            "kept": self.kept,
            "blank": self.blank,
            "malformed": {reason: self.malformed.get(reason, 0) for reason in MALFORMED_REASONS},
        }


def find_member(archive: zipfile.ZipFile) -> str:
    """Name of `fra.txt` in the archive, ignoring macOS resource forks (`__MACOSX/`, `._*`)."""
    candidates = [
        name
        for name in archive.namelist()
        if not name.startswith("__MACOSX/")
        and Path(name).name == MEMBER_NAME
        and not Path(name).name.startswith("._")
    ]
    if len(candidates) != 1:
        raise CorruptArchiveError(
            f"expected exactly one {MEMBER_NAME!r} outside __MACOSX/ in the archive, found "
            f"{candidates or 'none'} among {archive.namelist()[:10]}; supply the d2l fra-eng.zip "
            "(http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip)."
        )
    return candidates[0]


def open_archive(zip_path: str | Path) -> zipfile.ZipFile:
    """Opens the zip, turning a truncated or non-zip file into a `CorruptArchiveError`."""
    try:
        archive = zipfile.ZipFile(zip_path)
        bad_member = archive.testzip()  # CRC check: catches truncation inside member data
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise CorruptArchiveError(
            f"{zip_path} is not a readable zip archive ({error}); it is probably truncated or an "
            "interrupted download. Delete it and download http://d2l-data.s3-accelerate."
            "amazonaws.com/fra-eng.zip again, or pass a good copy as --config.data.zip_path=PATH."
        ) from error
    if bad_member is not None:
        raise CorruptArchiveError(
            f"{zip_path}: member {bad_member!r} fails its CRC check (corrupt or truncated zip); "
            "delete it and supply a good copy via data.zip_path or a new download."
        )
    return archive


def read_pairs(zip_path: str | Path, report: ReadReport | None = None) -> Iterator[CorpusLine]:
    """Yields the well-formed lines of `fra.txt`, in file order.

    Lines that are not valid UTF-8, have no tab, or have an empty side are skipped and counted
    in `report.malformed`; blank lines (e.g. the final newline) are counted in `report.blank`.
    """
    report = report if report is not None else ReadReport()
    with open_archive(zip_path) as archive:
        data = archive.read(find_member(archive))
    # Split on b"\n" only: str.splitlines would also split on U+2028 etc. inside sentences.
    for line_number, raw in enumerate(data.split(b"\n")):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            report.blank += 1
            continue
        reason = None
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            reason = "bad_utf8"
        else:
            parts = line.split("\t")
            if len(parts) < 2:
                reason = "no_tab"
            elif not parts[0].strip() or not parts[1].strip():
                reason = "empty_side"
        if reason is not None:
            report.malformed[reason] += 1
            if len(report.examples) < 5:
                report.examples.append(f"line {line_number + 1} ({reason}): {raw[:80]!r}")
            continue
        report.kept += 1
        yield CorpusLine(line_number, parts[0], parts[1])
