"""One trainer per workdir: an exclusive lock on `<workdir>/.lock` for the whole run.

Two trainers in one workdir interleave their checkpoints and metrics: one deletes the
other's save in flight, `metrics.jsonl` mixes both histories, and the workdir may end up
holding one run's checkpoints under the other's config. So a trainer takes
`fcntl.flock(LOCK_EX | LOCK_NB)` on the lock file before anything else; a second one fails
at once with `WorkdirLockedError` naming the holder's PID and host (written into the file).

The kernel releases a flock when its holder dies (kill -9, OOM, a lost VM), so a lock that
is held always belongs to a live process, and the file left by a dead one is simply taken
over. The holder deletes the file when it ends; a starter that locked a file which was
deleted meanwhile (its inode is no longer the path's) opens the new one and tries again.

A filesystem without flock (Lustre mounted without `-o flock`, NFS without its lock daemon:
`runtime.file_locks`) leaves the record in the file as the lock: a trainer whose record names a live
process (asked of the kernel on the same host; another host's is taken at its word) refuses,
naming it and the file to delete if that host was lost; otherwise it trains with a warning
(two trainers starting at the same moment are not told apart there).

Readers (translate, evaluate, averaging) take no lock: they must not stop a run, and they
survive its checkpoint rotation instead (`checkpoints.list_steps`, `averaging.last_readable`).
The lock is re-entrant within a process: the launcher takes it before its slow imports, and
`train_and_evaluate` takes it again for callers that skip the launcher.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from absl import logging

from transformer_jax.runtime.file_locks import lacks_flock, no_flock_reason
from transformer_jax.workdir.directory import WorkdirWriteError

LOCK_FILE = ".lock"

_held: dict[Path, int] = {}  # workdir (resolved) -> nesting depth, in this process


class WorkdirLockedError(RuntimeError):
    """Another live process trains in this workdir; the message names it."""


@contextlib.contextmanager
def hold(workdir: str | Path, *, enabled: bool = True) -> Iterator[None]:
    """Holds `<workdir>/.lock` for the block; raises `WorkdirLockedError` if another holds it.

    Creates `workdir` if needed, and removes it again on exit if it is still empty (a start
    refused later, e.g. by its config, leaves no trace). `enabled=False` (the processes of
    a multi-host run other than process 0, which share its workdir) does nothing.
    """
    if not enabled:
        yield
        return
    workdir = Path(workdir)
    key = workdir.absolute().resolve()
    if key in _held:  # the launcher took it; train_and_evaluate asks again
        _held[key] = _held.get(key, 0) + 1
        try:
            yield
        finally:
            _held[key] -= 1
            if not _held[key]:
                del _held[key]
        return
    created = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / LOCK_FILE
    handle = _acquire(path, workdir)
    _held[key] = 1
    try:
        yield
    finally:
        del _held[key]
        with contextlib.suppress(OSError):  # a workdir removed under us: nothing to release
            path.unlink()  # before unlocking: a starter that opened it retries (`_acquire`)
        os.close(handle)  # releases the flock
        if created:
            with contextlib.suppress(OSError):  # not empty: the run wrote something
                workdir.rmdir()


def _acquire(path: Path, workdir: Path) -> int:
    """An open descriptor of `path` holding its exclusive flock, with our name written in."""
    for _ in range(100):  # only a holder ending at this very moment makes us try again
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read(handle))
            os.close(handle)
            raise WorkdirLockedError(
                f"{workdir} is in use by another trainer ({holder}, lock {path}): wait for it "
                "to end or stop it, or train into another --workdir."
            ) from None
        except OSError as error:
            if not lacks_flock(error):
                os.close(handle)
                raise
            _check_record(handle, path, workdir, error)  # the file's record is the lock
        try:
            same_file = os.stat(path).st_ino == os.fstat(handle).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:  # the previous holder deleted it after we opened it
            os.close(handle)
            continue
        previous = _read(handle)
        if previous:  # a holder that died without deleting the file (kill -9, OOM, lost VM)
            logging.info(
                "Took over %s from %s, which is no longer running.", path, _describe(previous)
            )
        try:
            _write(handle)
        except OSError as error:  # a full disk: the run could not have written anything else
            with contextlib.suppress(OSError):
                path.unlink()  # before unlocking, as `hold` does
            os.close(handle)
            raise WorkdirWriteError.failed(error, workdir, f"Writing {path}") from None
        return handle
    raise WorkdirLockedError(
        f"{path} keeps being replaced; is another trainer starting and ending?"
    )


def _check_record(handle: int, path: Path, workdir: Path, error: OSError) -> None:
    """On a filesystem without flock: refuses a workdir whose lock file names a live trainer
    (`_alive`), else warns that only the record guards it."""
    holder = _read(handle)
    if _alive(holder):
        os.close(handle)
        raise WorkdirLockedError(
            f"{workdir} is in use by another trainer ({_describe(holder)}, lock {path}, "
            f"whose record is the lock: {no_flock_reason('the workdir', error)}): wait for it "
            f"to end or stop it, or train into another --workdir. If it is not running (a "
            f"host that was lost), delete {path}."
        )
    logging.warning(
        "%s; a second trainer is refused by the PID in %s only (two starting at the same "
        "moment are not).",
        no_flock_reason(workdir, error),
        path,
    )


def _alive(holder: dict) -> bool:
    """Whether the record's process runs: asked of the kernel on this host; a holder on
    another host is taken at its word; a record without a PID is no holder."""
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return False
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False  # a holder killed with -9 left the file
    except PermissionError:
        pass  # alive, another user's
    return True


def trainer_in(workdir: str | Path) -> str | None:
    """Who trains in `workdir` now, as the lock file names it ("PID 123 on host h, started
    ..."), else None. For readers' messages: it only reads the file (taking the flock, even
    shared, could refuse a trainer starting at that moment) and asks the kernel whether the
    PID lives; a holder on another host is taken at its word."""
    try:
        handle = os.open(Path(workdir) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        holder = _read(handle)
    finally:
        os.close(handle)
    if not holder:
        return _describe(holder)  # locked, its name not written yet: just starting
    if "pid" in holder and not _alive(holder):
        return None
    return _describe(holder)


def _read(handle: int) -> dict:
    try:
        os.lseek(handle, 0, os.SEEK_SET)
        text = os.read(handle, 4096).decode("utf-8", "replace")
        holder = json.loads(text) if text.strip() else {}
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(handle: int) -> None:
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    os.ftruncate(handle, 0)
    os.pwrite(handle, json.dumps(holder).encode(), 0)


def _describe(holder: dict) -> str:
    if not holder.get("pid"):  # it has the lock but has not written its name yet
        return "a process that is just starting"
    since = holder.get("since")
    started = (
        f", started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
        if isinstance(since, (int, float))
        else ""
    )
    return f"PID {holder['pid']} on host {holder.get('host', '?')}{started}"
