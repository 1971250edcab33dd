"""Preemption: SIGTERM, SIGINT or SIGHUP saves a checkpoint at the next step boundary, then
stops.

Preemptible VMs, Slurm, Kubernetes and `docker stop` send SIGTERM and kill the process a
grace period later; Colab and a terminal send SIGINT; a terminal or ssh session that closes
under a run started without nohup or tmux sends SIGHUP. Python's defaults end the run at
once (SIGTERM, SIGHUP) or with a KeyboardInterrupt traceback (SIGINT), losing every step
since the last checkpoint. While `StopSignals` is installed (the train loop,
`train_and_evaluate`), the first of them is only recorded; the loop sees it after the step
in flight, saves a checkpoint, waits for it, and raises `Preempted`, which
`experiments/train.py` prints as one line and exits with `EXIT_CODE`. Re-running the same
command resumes bit for bit.

A run started with `nohup` ignores SIGHUP and trains on, as nohup asks. After SIGHUP the
terminal is gone and writing to it fails (EIO): the loop writes only through
`logging`, which drops what it cannot write, so the save goes on; the notice of the signal
and the closing line are skipped where they cannot be written.

A second signal ends the process at once, without saving: after the first one the signals
get the operating system's default action back, which acts even while Python is inside a
long call (an XLA compile, a device step) where no Python handler can run. (In a notebook,
a second interrupt therefore restarts the kernel.)

Before and after the loop (building data, the final validation, the closing report) there
is nothing to save: the train launcher holds `sigterm_interrupts`, so SIGTERM there unwinds
as Ctrl-C does and ends in one line, not silently with exit 143.

Only the main thread can install signal handlers: a run started from another thread logs
one line and trains without them. The previous handlers come back when the run ends, so a
library caller (a test, a notebook) keeps its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from absl import logging

# EX_TEMPFAIL (sysexits.h): "a temporary failure; the user is invited to retry". A script
# that restarts preempted jobs re-runs the same command on this code.
EXIT_CODE = 75
# SIGHUP where the platform has it (not Windows): a closed terminal or ssh session.
_HANGUP = (signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()
SIGNALS = (signal.SIGTERM, signal.SIGINT, *_HANGUP)


def signals_to_catch() -> list[signal.Signals]:
    """`SIGNALS`, less SIGHUP where this process ignores it: `nohup` sets SIG_IGN so that a
    run outlives its terminal, and a run (or sweep) so started must go on when it closes."""
    return [s for s in SIGNALS if s not in _HANGUP or signal.getsignal(s) != signal.SIG_IGN]


class Preempted(Exception):
    """The run stopped on a signal after saving the checkpoint of `step`."""

    def __init__(self, signal_name: str, step: int):
        self.signal_name, self.step = signal_name, step
        super().__init__(
            f"Stopped by {signal_name}: saved step {step}; re-run the same command to resume."
        )


class StopSignals:
    """Records the first of `SIGNALS` between `install()` and `restore()`."""

    def __init__(self) -> None:
        self.received: str | None = None  # "SIGTERM", "SIGINT" or "SIGHUP" once one arrived
        self._previous: dict[signal.Signals, Any] = {}

    @classmethod
    def install(cls) -> StopSignals:
        """Catches `SIGNALS` from now on (main thread only; elsewhere, logs why not)."""
        stop = cls()
        if threading.current_thread() is not threading.main_thread():
            logging.info(
                "Training outside the main thread: SIGTERM/SIGINT/SIGHUP are not caught, so a "
                "preemption loses the steps since the last checkpoint."
            )
            return stop
        for signum in signals_to_catch():
            stop._previous[signum] = signal.signal(signum, stop._handle)
        return stop

    def restore(self) -> None:
        """Puts back the handlers that were there before `install()`."""
        for signum, previous in self._previous.items():
            # None: a handler installed outside Python, which cannot be put back.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
        for other in self._previous:  # a second signal: the OS default, which acts at once
            signal.signal(other, signal.SIG_DFL)
        # os.write, not logging or print: the main thread may be inside a write to stderr.
        try:
            os.write(
                2,
                f"{self.received} received: stopping after this step with a checkpoint; send "
                "it again to stop at once, without saving.\n".encode(),
            )
        except OSError:  # no stderr to write to (SIGHUP: the terminal is gone): save anyway
            pass

    def requested(self, step: int, every: int) -> str | None:
        """The signal to stop on at the boundary after `step`, or None.

        All processes of a multi-host run must save the same step (orbax saves are
        collective), so there the flags are gathered, only at multiples of `every` (the log
        interval) since it costs a round trip between hosts. One process: every step.
        """
        import jax

        if jax.process_count() == 1:
            return self.received
        if step % every:
            return None
        import numpy as np
        from jax.experimental import multihost_utils

        flags = multihost_utils.process_allgather(np.int32(self.received is not None))
        if not np.any(flags):
            return None
        return self.received or "a signal to another process"


@dataclasses.dataclass
class Outside:
    """What `sigterm_interrupts` saw: `received` is "SIGTERM" once one came."""

    received: str | None = None


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[Outside]:
    """Inside the block, SIGTERM is a KeyboardInterrupt, recorded (main thread only).

    Outside the training loop (building data, the final validation, the closing report)
    nothing is left to save, but SIGTERM's default action ended the launcher with exit 143
    and no word. As a KeyboardInterrupt it unwinds as Ctrl-C does, and a launcher tells the
    two apart by `Outside.received`. Not an exception of its own: raised while the main
    thread runs a garbage-collector callback, any exception is dropped by Python, and only a
    KeyboardInterrupt is delivered again (`runtime.interrupts`). The loop's own handlers
    (`StopSignals`) take over while it runs and give this one back. A second SIGTERM gets
    the default action again: it acts at once.
    """
    outside = Outside()
    if threading.current_thread() is not threading.main_thread():
        yield outside
        return

    def handle(signum: int, frame: Any) -> None:
        outside.received = signal.Signals(signum).name
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield outside
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
