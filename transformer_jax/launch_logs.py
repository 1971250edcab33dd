"""Keeps the libraries' routine log records out of a launcher's stderr.

orbax logs several INFO records per checkpoint save or restore, and warns whenever a
checkpoint is opened read-only (as translate, evaluate, export and averaging do on purpose);
JAX logs an INFO line for each backend plugin it probes for and does not find. None of
them reports a problem, and a user reads them as one. `quiet_library_logs()` drops exactly
these; importing this module changes no logging.
"""

from __future__ import annotations

import logging

# Warnings orbax logs whenever a checkpoint is opened read-only, as translate, evaluate,
# export and averaging do on purpose: they report no problem, and a user reads them as one.
_READ_ONLY_NOTICES = (
    "CheckpointManagerOptions.read_only=True",
    "Given directory is read only",
    # A checkpoint a live trainer rotated away while a reader listed it: our readers go on
    # to the next one (`checkpoints.list_steps`), and report a damaged one themselves.
    "Metadata file does not exist",
)
# JAX's INFO record of each backend plugin it tries and does not find (xla_bridge.py).
_BACKEND_PROBE = "Unable to initialize backend"


def quiet_library_logs() -> None:
    """Drops orbax's routine records from the absl log: its INFO records (several per save
    or restore) and its notices that a checkpoint directory is opened read-only; and JAX's
    INFO line that a backend it probes for is absent ("Unable to initialize backend 'tpu'"
    on every machine without a TPU, which reads like an error). Other warnings and errors,
    orbax's and JAX's included, still print. Call it once in a launcher's main (importing
    this module changes no logging)."""
    from absl import logging as absl_logging

    handler = absl_logging.get_absl_handler()
    if not any(f is _keep_record for f in handler.filters):
        handler.addFilter(_keep_record)


def _keep_record(record: logging.LogRecord) -> bool:
    """False (drop) for orbax's INFO records and its read-only notices, and JAX's INFO
    record of an absent backend; True otherwise."""
    path = record.pathname.replace("\\", "/")
    if path.endswith("/xla_bridge.py") and record.levelno < logging.WARNING:
        return not str(record.msg).startswith(_BACKEND_PROBE)
    if "/orbax/" not in path:
        return True
    if record.levelno < logging.WARNING:
        return False  # several INFO records per save and restore
    return record.levelno > logging.WARNING or not str(record.msg).startswith(_READ_ONLY_NOTICES)
