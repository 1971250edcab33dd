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
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import threading
import time
from collections.abc import Iterator
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
