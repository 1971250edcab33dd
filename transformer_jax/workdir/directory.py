"""Is this a directory a run can write into? Checked before anything is built.

`check_workdir` turns every way a `--workdir` can be unusable (empty, a regular file, under
a regular file, not creatable, not writable) into one `WorkdirError` naming the path, the
problem and the fix, instead of a traceback after the data was prepared. It creates nothing:
the directory is made when the run starts writing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class WorkdirError(ValueError):
    """The workdir cannot hold a run; the message names the path and the fix."""


def check_workdir(workdir: str | Path | None) -> Path:
    """`workdir` as a Path if a run can create and write it; else raises `WorkdirError`."""
    if workdir is None or not str(workdir).strip():
        raise WorkdirError(
            "--workdir is empty: give the directory for this run's checkpoints and metrics, "
            "e.g. --workdir=runs/fra_eng (it is created if missing)."
        )
    path = Path(workdir).expanduser()
    if path.exists() and not path.is_dir():
        raise WorkdirError(
            f"workdir {path} is a file, not a directory: choose another --workdir "
            "(or move the file away)."
        )
    existing = path
    while not existing.exists():  # the nearest ancestor that exists must be a writable dir
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise WorkdirError(
            f"workdir {path} cannot be created: {existing} is a file, not a directory. Choose "
            "another --workdir."
        )
    problem = write_problem(existing)
    if problem:
        verb = "is not writable" if existing == path else f"cannot be created in {existing}"
        raise WorkdirError(
            f"workdir {path} {verb} ({problem}). Choose a --workdir you can write, or fix the "
            "permissions."
        )
    return path


def write_problem(directory: Path) -> str | None:
    """None if a file can be created (and removed) in `directory`, else the OS's reason."""
    if not os.access(directory, os.W_OK | os.X_OK):
        return "permission denied"
    try:  # os.access does not know read-only mounts, and says yes to root everywhere
        handle, name = tempfile.mkstemp(prefix=".write_test_", dir=directory)
        os.close(handle)
        os.unlink(name)
    except OSError as error:
        return error.strerror or type(error).__name__
    return None
