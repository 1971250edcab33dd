"""A failed checkpoint save stops the run in one line, and nothing is trained past it.

orbax writes a checkpoint in background threads (`checkpoints.save_checkpoint` returns at
once). When a write fails (a full disk: ENOSPC, a quota, a permission), orbax logs three or
four tracebacks from those threads and raises the error only at the next save or at the
end, so the run trained on past a checkpoint that does not exist (issue 39: 20-130
tracebacks, no message).

`SaveWatch` looks after one run's saves: `check(step)` after every step raises the error of
a save that has finished (it never waits for one in flight: a flag read), `save` reports a
save that fails as it starts (orbax first waits for the previous one), and `close` waits for
the last one. Each raises `CheckpointSaveError`: one line with the error, the step of the
failed save, and the newest checkpoint on disk, which a failed save leaves whole (orbax
writes into a temporary directory and renames it when complete; older checkpoints are
deleted only after that). orbax's tracebacks of the failure, and the "Event loop is closed"
echo of each array write it abandoned, are dropped while the watch is open: the same error
reaches `check` or `close`, which report it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir.directory import newest_checkpoint


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written; the run stopped. The message says what is intact."""


class SaveWatch:
    """The asynchronous saves of one run; `close()` it when the run ends."""

    def __init__(self, manager: ocp.CheckpointManager):
        self.manager = manager
        self.step: int | None = None  # the last step the run reached
        self.saving: int | None = None  # the step of the last save started
        self._reported = False
        self._filter = _DropOrbaxTracebacks()
        logging.getLogger("absl").addFilter(self._filter)
        self._hook = _DropClosedLoopEchoes(sys.unraisablehook)
        sys.unraisablehook = self._hook

    def check(self, step: int) -> None:
        """Raises `CheckpointSaveError` if a save has failed; returns at once otherwise."""
        self.step = step
        if not self.manager.is_saving_in_progress():
            self._wait()  # nothing in flight: returns at once, or raises the failure

    def save(self, state: Any, data_state: dict, meta: dict) -> None:
        """`checkpoints.save_checkpoint`, reporting a failure as `CheckpointSaveError`."""
        self.step = int(state.step)
        self._wait()  # orbax waits for the previous save anyway; its failure names its step
        self.saving = self.step
        try:
            ckpt.save_checkpoint(self.manager, state, data_state, meta)
        except Exception as error:
            raise self._error(error) from error

    def close(self) -> None:
        """Waits for the save in flight (raising its failure) and closes the manager."""
        try:
            if not self._reported:
                self._wait()
        finally:
            # orbax raises a failed save again on every wait, close() included: reported.
            with contextlib.suppress(Exception):
                self.manager.close()
            # After a failed save, orbax's background threads can still log the failure's
            # traceback once the manager is closed (a race seen in CI): keep them quiet.
            if not self._reported:
                logging.getLogger("absl").removeFilter(self._filter)
                if sys.unraisablehook is self._hook:
                    sys.unraisablehook = self._hook.previous

    def _wait(self) -> None:
        try:
            self.manager.wait_until_finished()
        except Exception as error:
            raise self._error(error) from error

    def _error(self, error: Exception) -> CheckpointSaveError:
        self._reported = True
        directory = Path(self.manager.directory)
        kept = newest_checkpoint(directory)
        # The failed save's step: the run has trained on a little since (it is checked
        # after each step), and those steps are lost with it.
        which = f"checkpoint {self.saving}" if self.saving is not None else "a checkpoint"
        intact = (
            f"checkpoint {kept} is intact" if kept is not None else "no checkpoint was saved yet"
        )
        return CheckpointSaveError(
            f"Saving {which} in {directory} failed ({type(error).__name__}: "
            f"{ckpt.one_line(error)}), so the run stopped; {intact}. Fix the cause (free space "
            "on the disk if it is full), then re-run the same command to resume"
            + (f" from step {kept}." if kept is not None else ".")
        )


class _DropOrbaxTracebacks(logging.Filter):
    """Drops orbax's error records that carry a traceback (those of a failed save)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from_orbax = "/orbax/" in record.pathname.replace("\\", "/")
        return not (from_orbax and record.levelno >= logging.ERROR and record.exc_info)


class _DropClosedLoopEchoes:
    """`sys.unraisablehook` while saves are watched: drops the "Event loop is closed" echoes
    of a failed save, passes everything else on.

    orbax runs a save's array writes in an event loop of its own, which it closes as soon as
    the first write fails (`asyncio_utils._run_sync_via_new_loop`); tensorstore then posts
    the completion of every write still in flight to that closed loop, and each raises
    `RuntimeError: Event loop is closed` into this hook: one traceback per array (270 for
    the README model on a full disk), before the one line that reports the failure.
    """

    def __init__(self, previous: Any):
        self.previous = previous

    def __call__(self, unraisable: Any) -> None:
        error = unraisable.exc_value
        if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
            return
        self.previous(unraisable)
