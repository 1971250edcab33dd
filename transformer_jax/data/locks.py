"""An exclusive lock between processes, for work several runs may start at once on one disk.

Two runs that share a `data_dir` (a sweep's points, the processes of a multi-host run on
one machine, a test session's workers) would otherwise build the same TFDS dataset or train
the same SentencePiece model together, and the second to finish fails to rename its
`incomplete.*` directory onto the first one's. Under the lock, the first builds and the
others wait, then find the result on disk and reuse it.

`fcntl.flock` locks belong to the open file, so a process that dies releases its lock.

A directory no process can write to (a shared, read-only dataset mount) has nothing to race
over: there the block runs without a lock, reading what was built before. On a filesystem
without flock (`runtime.file_locks`) the block runs without one too, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path

from absl import logging

from transformer_jax.runtime.file_locks import lacks_flock, no_flock_reason

# What writing into a directory this process cannot write to raises (OSError.errno).
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
_UNLOCKED: set[Path] = set()  # folders on a filesystem without flock, warned of already


def is_read_only_error(error: OSError) -> bool:
    """Whether `error` says the directory cannot be written (read-only mount, permissions)."""
    return error.errno in READ_ONLY_ERRNOS


@contextlib.contextmanager
def exclusive(lock_file: str | Path, *, what: str = "") -> Iterator[None]:
    """Holds an exclusive lock on `lock_file` (created with its parents) for the block.

    Waits as long as another process holds it, saying once in the log what it waits for.
    Where the lock file cannot be created (a read-only directory) the block runs unlocked.
    """
    lock_file = Path(lock_file)
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_file, "ab")  # holds the flock, no text; closed by `with handle` below
    except OSError as error:
        if not is_read_only_error(error):
            raise
        logging.info(
            "%s is read-only here: %s without a lock.", lock_file.parent, what or "reading"
        )
        handle = None
    if handle is None:  # outside the except: errors of the block do not chain to this one
        yield
        return
    with handle:
        locked = True
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logging.info("Waiting for another process to finish %s (%s)", what or "", lock_file)
            start = time.perf_counter()
            fcntl.flock(handle, fcntl.LOCK_EX)
            logging.info("Lock %s acquired after %.1fs", lock_file, time.perf_counter() - start)
        except OSError as error:
            if not lacks_flock(error):
                raise
            locked = False
            if lock_file.parent not in _UNLOCKED:  # once a folder: each build asks again
                _UNLOCKED.add(lock_file.parent)
                logging.warning(
                    "%s: builds there run without a lock (two runs building the same thing "
                    "at once may collide).",
                    no_flock_reason(lock_file.parent, error),
                )
        if not locked:  # outside the except: errors of the block do not chain to this one
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
