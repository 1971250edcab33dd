"""Config sweeps: `get_hyper(h, name)` definitions, a resumable runner, gathered results."""

from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.child import SweepInterrupted
from transformer_jax.sweeps.lock import SweepLockedError
from transformer_jax.sweeps.results import check_result_paths, gather, markdown_table, point_row
from transformer_jax.sweeps.runner import (
    PointFailed,
    SweepError,
    SweepPoint,
    check_launcher_flags,
    check_saved_configs,
    check_sweep_dir,
    default_sweep_dir,
    point_name,
    run_sweep,
    shipped_sweeps,
    sweep_points,
    validate_points,
)

__all__ = [
    "PointFailed",
    "SweepError",
    "SweepInterrupted",
    "SweepLockedError",
    "SweepPoint",
    "check_launcher_flags",
    "check_result_paths",
    "check_saved_configs",
    "check_sweep_dir",
    "default_sweep_dir",
    "gather",
    "hyper",
    "markdown_table",
    "point_name",
    "point_row",
    "run_sweep",
    "shipped_sweeps",
    "sweep_points",
    "validate_points",
]
