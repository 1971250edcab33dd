"""`launch_logs.quiet_library_logs` (launchers call it as `launch.quiet_library_logs`):
orbax's routine records and JAX's backend probe leave a launcher's stderr, nothing else.

Records are made as orbax's modules make them (absl logging, their source path under
`orbax/`) and passed through the absl handler's filters, which is what the launchers use.
"""

from __future__ import annotations

import logging

import pytest
from absl import logging as absl_logging

from transformer_jax import launch_logs

ORBAX_FILE = "/venv/lib/python3.11/site-packages/orbax/checkpoint/checkpoint_manager.py"
OURS = "/repo/transformer_jax/workdir/checkpoints.py"
XLA_BRIDGE = "/venv/lib/python3.11/site-packages/jax/_src/xla_bridge.py"


def _record(level: int, msg: str, pathname: str) -> logging.LogRecord:
    return logging.LogRecord("absl", level, pathname, 1, msg, None, None)


@pytest.fixture
def handler():
    handler = absl_logging.get_absl_handler()
    before = list(handler.filters)
    launch_logs.quiet_library_logs()
    launch_logs.quiet_library_logs()  # a second call adds nothing
    yield handler
    handler.filters[:] = before


def test_one_filter_however_often_it_is_called(handler):
    added = [f for f in handler.filters if f is launch_logs._keep_record]
    assert len(added) == 1


@pytest.mark.parametrize(
    "level, msg, pathname, kept",
    [
        (logging.INFO, "Restoring checkpoint from %s.", ORBAX_FILE, False),
        (logging.WARNING, "CheckpointManagerOptions.read_only=True, setting max_to_keep=None.",
         ORBAX_FILE, False),
        (logging.WARNING, "Given directory is read only=%s", ORBAX_FILE, False),
        # A checkpoint rotated away by a live trainer while a reader listed it.
        (logging.WARNING, "Metadata file does not exist: %s", ORBAX_FILE, False),
        # Anything else orbax warns about, and every error, still prints.
        (logging.WARNING, "Item 'state' was not found in the checkpoint.", ORBAX_FILE, True),
        (logging.ERROR, "Given directory is read only=%s", ORBAX_FILE, True),
        # Our own records and other libraries' are untouched, INFO included.
        (logging.INFO, "step 200/2400 | loss 4.3", OURS, True),
        (logging.INFO, "Restoring checkpoint from %s.", "/venv/site-packages/jax/x.py", True),
        # JAX's probe of an absent backend (every machine without a TPU) goes; its other
        # records, and the same words as a warning, stay.
        (logging.INFO, "Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so",
         XLA_BRIDGE, False),
        (logging.WARNING, "Unable to initialize backend 'cuda': ...", XLA_BRIDGE, True),
        (logging.INFO, "Platform 'cpu' is experimental", XLA_BRIDGE, True),
    ],
)  # fmt: skip
def test_routine_orbax_records_are_dropped_and_others_kept(handler, level, msg, pathname, kept):
    assert bool(handler.filter(_record(level, msg, pathname))) is kept
