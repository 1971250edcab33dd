"""Silences the echo of a failed orbax read, and only that, while checkpoints are restored.

When one array of a checkpoint cannot be read (a damaged ocdbt data file), orbax's restore
raises and closes its asyncio event loop while tensorstore still completes the other reads
on its own threads. Each completion then calls `loop.call_soon_threadsafe` on the closed loop
from C++, and Python reports the `RuntimeError: Event loop is closed` through
`sys.unraisablehook`, which prints a traceback per array: hundreds of them, burying the one
line that says which checkpoint is bad. (Measured with orbax-checkpoint 0.12.8 and a
random-bytes ocdbt file: 13-26 per failed tiny checkpoint, 150-450 for the default model.)

`quiet_failed_reads()` installs a hook that drops exactly those reports and passes every
other unraisable exception to the hook it replaced, which it puts back on exit.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

_CLOSED_LOOP = "Event loop is closed"


class _Quiet:
    def __init__(self, previous: Any):
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

    def drain(self, quiet_for: float, limit: float) -> None:
        """Waits until no late report came for `quiet_for` seconds (at most `limit`)."""
        end = time.monotonic() + limit
        while time.monotonic() < end and time.monotonic() - self.last < quiet_for:
            time.sleep(0.02)


@contextlib.contextmanager
def quiet_failed_reads() -> Iterator[_Quiet]:
    """Drops the "Event loop is closed" reports of orbax's reader threads inside the block.

    After a read failed, call `.drain(quiet_for, limit)` on the yielded object before leaving
    the block: tensorstore may finish its other reads a moment after orbax gave up.
    """
    quiet = _Quiet(sys.unraisablehook)
    sys.unraisablehook = quiet.hook
    try:
        yield quiet
    finally:
        sys.unraisablehook = quiet.previous
