"""workdir/read_noise.py: only the echoes of abandoned checkpoint reads are dropped."""

from __future__ import annotations

import logging

from transformer_jax.workdir.read_noise import quiet_failed_reads


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
