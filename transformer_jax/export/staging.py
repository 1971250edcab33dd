"""Write an export into a temporary sibling folder and rename it into place on success.

    with staged_dir("exports/fra_eng_ct2", force=False) as tmp:
        write_everything(tmp)
    # exports/fra_eng_ct2 now holds it all, or (on any error) does not exist

An export that fails half-way (a missing library, a full disk, Ctrl-C) leaves no folder that
looks like an export, so running it again does not stop at "already exists". The sibling
(`.NAME.partial-XXXX` beside NAME) is on the same file system, so the rename is atomic.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def check_new(output_dir: str | Path, force: bool) -> Path:
    """`output_dir` as a Path; a FileExistsError naming --force if it exists and not `force`."""
    output_dir = Path(output_dir)
    if output_dir.exists() and not force:
        raise FileExistsError(
            f"{output_dir} already exists; choose a new --output_dir or pass --force."
        )
    return output_dir


@contextlib.contextmanager
def staged_dir(output_dir: str | Path, *, force: bool = False) -> Iterator[Path]:
    """An empty temporary folder beside `output_dir`, renamed to it when the block ends
    without an error (an existing `output_dir` is then replaced, with `force`), removed when
    it raises."""
    output_dir = check_new(output_dir, force)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.partial-", dir=output_dir.parent))
    try:
        yield tmp
        check_new(output_dir, force)  # made while we wrote: keep it, drop ours
        if output_dir.exists():  # --force: the old export goes only once the new one is whole
            old = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.old-", dir=output_dir.parent))
            os.replace(output_dir, old / output_dir.name)
            os.replace(tmp, output_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, output_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a rename
