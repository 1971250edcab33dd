"""workdir/read_noise.py: only the echoes of abandoned checkpoint reads, and orbax's error
for a step a trainer deleted under a reader, are dropped."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from etils import epath
from orbax.checkpoint._src.metadata import checkpoint as orbax_metadata

from transformer_jax.workdir.read_noise import quiet_failed_reads, quiet_vanished_steps


def _task_error(logger: logging.Logger) -> None:
    # What asyncio's default exception handler logs for a collected task holding an error.
    logger.error("Task exception was never retrieved\nfuture: <Task finished ...>")


def test_never_retrieved_task_errors_are_dropped_only_inside_the_block(caplog):
    logger = logging.getLogger("asyncio")
    with caplog.at_level(logging.ERROR):
        with quiet_failed_reads() as quiet:
            _task_error(logger)
            logger.error("Unclosed client session")  # any other asyncio error still shows
            quiet.drain(quiet_for=0.01, limit=0.1)
        assert quiet.dropped == 1
        _task_error(logger)  # after the block: reported as usual
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "Unclosed client session"
    assert len(messages) == 2 and messages[1].startswith("Task exception was never retrieved")
    assert quiet not in logger.filters


def test_never_retrieved_future_errors_are_dropped_too(caplog):
    """A plain future of an abandoned read is reported in other words (seen in CI)."""
    logger = logging.getLogger("asyncio")
    with caplog.at_level(logging.ERROR):
        with quiet_failed_reads() as quiet:
            logger.error("Future exception was never retrieved\nfuture: <Future finished ...>")
            quiet.drain(quiet_for=0.01, limit=0.1)
    assert quiet.dropped == 1 and not caplog.records


def _read_step_metadata(step_dir: Path) -> None:
    """orbax's own read of a step's `_CHECKPOINT_METADATA` (a listing does this per step)."""
    store = orbax_metadata.metadata_store(enable_write=False)
    store.read(orbax_metadata.step_metadata_file_path(step_dir))


def test_a_step_deleted_under_a_listing_is_not_reported_as_an_error(tmp_path, monkeypatch, caplog):
    """A trainer rotating its checkpoints deletes a step between orbax's look at the step's
    metadata file and its read (seen in CI beside a run keeping one checkpoint)."""
    step_dir = tmp_path / "checkpoints" / "1"
    step_dir.mkdir(parents=True)
    orbax_metadata.step_metadata_file_path(step_dir).write_text("{}")
    read_text = epath.gpath.PosixGPath.read_text

    def deleted_first(path, *args, **kwargs):
        shutil.rmtree(step_dir, ignore_errors=True)  # the trainer's deletion, just then
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(epath.gpath.PosixGPath, "read_text", deleted_first)
    filters = list(logging.getLogger("absl").filters)
    with caplog.at_level(logging.WARNING):
        with quiet_vanished_steps():
            _read_step_metadata(step_dir)
            _read_step_metadata(step_dir)  # its directory gone: "does not exist"
        assert not caplog.records, [r.getMessage() for r in caplog.records]
        step_dir.mkdir()
        orbax_metadata.step_metadata_file_path(step_dir).write_text("{}")
        _read_step_metadata(step_dir)  # outside the block: orbax's error as before
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert caplog.records[0].getMessage().startswith("Failed to read Metadata file")
    assert logging.getLogger("absl").filters == filters  # the filter went with the block


def test_a_step_metadata_file_that_is_there_but_unreadable_is_still_reported(tmp_path, caplog):
    step_dir = tmp_path / "checkpoints" / "1"
    orbax_metadata.step_metadata_file_path(step_dir).mkdir(parents=True)  # a directory
    (tmp_path / "checkpoints" / "2").mkdir()  # a step without the file, its directory there
    with caplog.at_level(logging.WARNING), quiet_vanished_steps():
        _read_step_metadata(step_dir)
        _read_step_metadata(tmp_path / "checkpoints" / "2")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith("Failed to read Metadata file") and "1/_CHECKPOINT" in messages[0]
    assert messages[1].startswith("Metadata file does not exist")
