"""One sweep per sweep directory: an exclusive lock on `<sweep_dir>/.sweep.lock` while it runs.

Two sweeps on one folder run the same points at once: each point's trainer lock refuses
the second, which then records the point as failed with the other sweep's log line, and
the two sweeps' records disagree. The second sweep is refused instead, before it runs
anything. As for the trainer's lock (`workdir/lock.py`), a flock dies with its holder
(kill -9 included), so a lock that is held belongs to a live sweep; the file stays. On a
filesystem without flock (`runtime.file_locks`) the sweep runs with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from absl import logging

from transformer_jax.runtime.file_locks import lacks_flock, no_flock_reason

LOCK_FILE = ".sweep.lock"


class SweepLockedError(ValueError):
    """Another live sweep runs in this sweep directory; the message names it and the fix."""


@contextlib.contextmanager
def hold(sweep_dir: str | Path) -> Iterator[None]:
    """Holds `<sweep_dir>/.sweep.lock` for the block (creating the folder); raises
    `SweepLockedError` naming the holder if another process holds it."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / LOCK_FILE
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(handle, 200, 0).decode("utf-8", "replace").strip() or "a process"
        os.close(handle)
        raise SweepLockedError(
            f"{sweep_dir} is in use by another sweep ({holder}, lock {path}): wait for it to "
            "end or stop it, or pass another --sweep_dir."
        ) from None
    except OSError as error:
        if not lacks_flock(error):
            os.close(handle)
            raise
        # Each point's workdir keeps its own guard (its lock file's record): run, warned.
        logging.warning("%s: a second sweep here is not refused.", no_flock_reason(path, error))
    try:
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"PID {os.getpid()} on host {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(handle)  # releases the flock
