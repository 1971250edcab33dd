"""A failed checkpoint save stops the run in one line, and nothing is trained past it.

orbax writes a checkpoint in background threads (`checkpoints.save_checkpoint` returns at
once). When a write fails (a full disk: ENOSPC, a quota, a permission), orbax logs three or
four tracebacks from those threads and raises the error only at the next save or at the
end, so the run trained on past a checkpoint that does not exist (issue 39: 20-130
tracebacks, no message).

`SaveWatch` looks after one run's saves: `check(step)` after every step raises the error of
a save that has finished (it never waits for one in flight: a flag read), `save` reports a
save that fails as it starts (orbax first waits for the previous one), and `close` waits for
the last one. Each raises `CheckpointSaveError`: one line with the error, the step the run
stopped at, and the newest checkpoint on disk, which a failed save leaves whole (orbax
writes into a temporary directory and renames it when complete; older checkpoints are
deleted only after that). orbax's tracebacks of the failure are dropped while the watch is
open: the same error reaches `check` or `close`, which report it.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from transformer_jax.workdir import checkpoints as ckpt


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written; the run stopped. The message says what is intact."""


class SaveWatch:
    """The asynchronous saves of one run; `close()` it when the run ends."""

    def __init__(self, manager: ocp.CheckpointManager):
        self.manager = manager
        self.step: int | None = None  # the last step the run reached
        self._reported = False
        self._filter = _DropOrbaxTracebacks()
        logging.getLogger("absl").addFilter(self._filter)

    def check(self, step: int) -> None:
        """Raises `CheckpointSaveError` if a save has failed; returns at once otherwise."""
        self.step = step
        if not self.manager.is_saving_in_progress():
            self._wait()  # nothing in flight: returns at once, or raises the failure

    def save(self, state: Any, data_state: dict, meta: dict) -> None:
        """`checkpoints.save_checkpoint`, reporting a failure as `CheckpointSaveError`."""
        self.step = int(state.step)
        try:
            ckpt.save_checkpoint(self.manager, state, data_state, meta)
        except Exception as error:  # orbax raises the previous save's failure here too
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

    def _wait(self) -> None:
        try:
            self.manager.wait_until_finished()
        except Exception as error:
            raise self._error(error) from error

    def _error(self, error: Exception) -> CheckpointSaveError:
        self._reported = True
        directory = Path(self.manager.directory)
        kept = newest_on_disk(directory)
        stopped = f"; the run stopped at step {self.step}" if self.step is not None else ""
        intact = (
            f"checkpoint {kept} is intact" if kept is not None else "no checkpoint was saved yet"
        )
        return CheckpointSaveError(
            f"Saving a checkpoint in {directory} failed ({type(error).__name__}: "
            f"{ckpt.one_line(error)}){stopped}; {intact}. Fix the cause (free space on the "
            "disk if it is full), then re-run the same command to resume"
            + (f" from step {kept}." if kept is not None else ".")
        )


def newest_on_disk(checkpoint_dir: Path) -> int | None:
    """The highest committed step in `checkpoint_dir` (orbax names it by its step alone;
    a save in progress is `<step>.orbax-checkpoint-tmp...`), or None."""
    try:
        steps = [int(p.name) for p in checkpoint_dir.iterdir() if p.name.isdigit()]
    except OSError:
        return None
    return max(steps, default=None)


class _DropOrbaxTracebacks(logging.Filter):
    """Drops orbax's error records that carry a traceback (those of a failed save)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from_orbax = "/orbax/" in record.pathname.replace("\\", "/")
        return not (from_orbax and record.levelno >= logging.ERROR and record.exc_info)
