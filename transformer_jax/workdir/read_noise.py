"""Silences the echo of a failed orbax read, and only that, while checkpoints are restored.

When one array of a checkpoint cannot be read (a damaged ocdbt data file), orbax's restore
raises and closes its asyncio event loop while tensorstore still completes the other reads
on its own threads. Each completion then calls `loop.call_soon_threadsafe` on the closed loop
from C++, and Python reports the `RuntimeError: Event loop is closed` through
`sys.unraisablehook`, which prints a traceback per array: hundreds of them, burying the one
line that says which checkpoint is bad. (Measured with orbax-checkpoint 0.12.8 and a
random-bytes ocdbt file: 13-26 per failed tiny checkpoint, 150-450 for the default model.)

The reads orbax abandoned also leave asyncio tasks (and futures) holding their errors; when
one is garbage-collected, asyncio logs "Task exception was never retrieved" (or "Future
exception ...") with the error, one ERROR record per array, whenever the collector happens
to run (so sometimes after the restore returned). `quiet_failed_reads()` installs a hook
that drops exactly the closed-loop reports and passes every other unraisable exception to
the hook it replaced, and a filter on the "asyncio" logger that drops the never-retrieved
errors; `drain` collects the abandoned tasks while both are in place. Both are removed on
exit.

`quiet_vanished_steps()` drops orbax's error for a step's metadata file deleted while a
reader lists the steps of a run that is training (its checkpoints rotating).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_CLOSED_LOOP = "Event loop is closed"
# asyncio's words for a task's and for a plain future's (both seen from abandoned reads).
_NEVER_RETRIEVED = ("Task exception was never retrieved", "Future exception was never retrieved")


class _Quiet(logging.Filter):
    def __init__(self, previous: Any):
        super().__init__()
        self.previous = previous
        self.dropped = 0
        self.last = time.monotonic()
        self._lock = threading.Lock()

    def hook(self, unraisable: Any) -> None:
        error = unraisable.exc_value
        if isinstance(error, RuntimeError) and str(error) == _CLOSED_LOOP:
            with self._lock:
                self.dropped += 1
                self.last = time.monotonic()
            return
        self.previous(unraisable)

    def filter(self, record: logging.LogRecord) -> bool:
        """A logging filter for "asyncio": False (drop) for an abandoned read's task error."""
        if str(record.msg).startswith(_NEVER_RETRIEVED):
            with self._lock:
                self.dropped += 1
                self.last = time.monotonic()
            return False
        return True

    def drain(self, quiet_for: float, limit: float) -> None:
        """Waits until no late report came for `quiet_for` seconds (at most `limit`), then
        collects the abandoned tasks, so their errors are reported (and dropped) here."""
        end = time.monotonic() + limit
        while time.monotonic() < end and time.monotonic() - self.last < quiet_for:
            time.sleep(0.02)
        gc.collect()


@contextlib.contextmanager
def quiet_failed_reads() -> Iterator[_Quiet]:
    """Drops the "Event loop is closed" reports of orbax's reader threads and asyncio's
    "Task exception was never retrieved" records inside the block.

    After a read failed, call `.drain(quiet_for, limit)` on the yielded object before leaving
    the block: tensorstore may finish its other reads a moment after orbax gave up.
    """
    quiet = _Quiet(sys.unraisablehook)
    asyncio_logger = logging.getLogger("asyncio")
    sys.unraisablehook = quiet.hook
    asyncio_logger.addFilter(quiet)
    try:
        yield quiet
    finally:
        asyncio_logger.removeFilter(quiet)
        sys.unraisablehook = quiet.previous


# orbax's words when a step's metadata file cannot be read (`metadata/checkpoint.py`): the
# file was there and is gone by the read, or it is not there at all.
_READ_FAILED = "Failed to read Metadata file: "
_NOT_THERE = "Metadata file does not exist: "


class _VanishedStep(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for orbax's failed read of a step's metadata that a trainer deleted:
        the file gone since orbax saw it, or not there because its step directory is gone."""
        message = str(record.msg)
        if not message.startswith((_READ_FAILED, _NOT_THERE)) or not record.args:
            return True
        try:
            path = Path(str(record.args[0]))
            return (path if message.startswith(_READ_FAILED) else path.parent).exists()
        except OSError:  # cannot tell: keep the record
            return True


@contextlib.contextmanager
def quiet_vanished_steps() -> Iterator[None]:
    """Drops orbax's ERROR "Failed to read Metadata file: <step>/_CHECKPOINT_METADATA"
    (and its "does not exist" warning) inside the block where the file is gone by then.

    A reader listing the checkpoints of a run that is training reads each step's metadata;
    a trainer keeping `keep_checkpoints` steps deletes the oldest after each save, so a step
    listed a moment before may be gone when its file is opened. That is the rotation, not a
    fault (the listing is done again, `checkpoints.list_steps`); a file that is still there
    and cannot be read (its permissions, say) is still reported.
    """
    quiet = _VanishedStep()
    logger = logging.getLogger("absl")  # orbax logs through absl's logger
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
