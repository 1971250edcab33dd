"""Is this a directory a run can write into? Checked before anything is built.

`check_workdir` turns every way a `--workdir` can be unusable (empty, a regular file, under
a regular file, not creatable, not writable, holding a file where a run keeps a directory or
the other way round) into one `WorkdirError` naming the path, the
problem and the fix, instead of a traceback after the data was prepared. It creates nothing:
the directory is made when the run starts writing.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


class WorkdirError(ValueError):
    """The workdir cannot hold a run; the message names the path and the fix."""


class WorkdirWriteError(WorkdirError):
    """A write into the workdir failed (a full disk); the run stopped. The message says what
    is intact and how to resume (`write_failure`).

    `failed(error, workdir, what)` makes one whose message is worded when it is shown, not
    when it is raised: the train loop completes a checkpoint save in flight as it unwinds
    (`CheckpointSaves.close`), and the line must name that checkpoint, not "no checkpoint
    was saved yet" (seen once in a few runs of tests/test_training_faults.py)."""

    def __init__(self, message: str = "", failure: tuple[OSError, Path, str] | None = None):
        super().__init__(message)
        self.failure = failure

    @classmethod
    def failed(cls, error: OSError, workdir: str | Path, what: str) -> WorkdirWriteError:
        """The error for a failed write of `what` into `workdir` (`write_failure`)."""
        return cls(failure=(error, Path(workdir), what))

    def __str__(self) -> str:
        return write_failure(*self.failure) if self.failure else super().__str__()


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # no space left on the device; the quota is used up


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
    if existing == path:
        _check_entries(path)
    problem = write_problem(existing)
    if problem:
        verb = "is not writable" if existing == path else f"cannot be created in {existing}"
        raise WorkdirError(
            f"workdir {path} {verb} ({problem}). Choose a --workdir you can write, or fix the "
            "permissions."
        )
    return path


# What a run creates in its workdir, and whether each is a directory: one of the wrong kind
# (e.g. a file named `checkpoints`) would fail deep inside orbax or the lock with a traceback.
# The names of `workdir.checkpoints`, `history` and `lock`, not imported: they load orbax.
_ENTRIES = {
    "checkpoints": True,
    "checkpoints_corrupt": True,
    "tokenizer": True,
    "tensorboard": True,
    "previous_runs": True,
    "config.json": False,
    "metrics.jsonl": False,
    ".lock": False,
}


def _check_entries(path: Path) -> None:
    """Raises `WorkdirError` if an entry of `_ENTRIES` exists in `path` with the wrong kind."""
    for name, is_dir in _ENTRIES.items():
        entry = path / name
        if entry.exists() and entry.is_dir() != is_dir:
            what, should = ("a file", "a directory") if is_dir else ("a directory", "a file")
            raise WorkdirError(
                f"{entry} is {what}, but a run keeps {should} there: move it out of the "
                "workdir (or choose another --workdir)."
            )


def write_problem(directory: Path) -> str | None:
    """None if a file can be created (and removed) in `directory`, else the OS's reason
    ("Permission denied", "Read-only file system", "No space left on device")."""
    try:  # tried, not os.access: that says yes to root everywhere and gives no reason
        handle, name = tempfile.mkstemp(prefix=".write_test_", dir=directory)
        os.close(handle)
        os.unlink(name)
    except OSError as error:
        return error.strerror or type(error).__name__
    return None


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` is the OS saying the disk (or the user's quota) is full."""
    return isinstance(error, OSError) and error.errno in DISK_FULL


def write_failure(error: OSError, workdir: str | Path, what: str) -> str:
    """One line for a failed write of `what` into `workdir`: the OS's reason, the newest
    checkpoint (which a failed write outside it leaves whole), and the fix."""
    reason = " ".join(f"{type(error).__name__}: {error}".split())
    newest = newest_checkpoint(Path(workdir) / "checkpoints")
    intact = (
        f"checkpoint {newest} is intact" if newest is not None else "no checkpoint was saved yet"
    )
    fix = "Free space on that disk" if is_disk_full(error) else "Fix the cause"
    resume = f"resume from step {newest}" if newest is not None else "start again"
    return f"{what} failed ({reason}); {intact}. {fix}, then re-run the same command to {resume}."


def newest_checkpoint(checkpoint_dir: Path) -> int | None:
    """The highest committed step in `checkpoint_dir` (orbax names it by its step alone;
    a save in progress is `<step>.orbax-checkpoint-tmp...`), or None."""
    try:
        steps = [int(p.name) for p in checkpoint_dir.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return max(steps, default=None)
