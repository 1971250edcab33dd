"""Config sweeps: `get_hyper(h, name)` definitions, a resumable runner, gathered results."""

from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.results import gather, markdown_table, point_row
from transformer_jax.sweeps.runner import (
    PointFailed,
    SweepError,
    SweepPoint,
    check_saved_configs,
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
    "SweepPoint",
    "check_saved_configs",
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
