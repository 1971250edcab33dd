"""Config sweeps: `get_hyper(h, name)` definitions, a resumable runner, gathered results."""

from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.results import gather, markdown_table, point_row
from transformer_jax.sweeps.runner import (
    SweepPoint,
    load_config_module,
    point_name,
    run_sweep,
    sweep_points,
)

__all__ = [
    "SweepPoint",
    "gather",
    "hyper",
    "load_config_module",
    "markdown_table",
    "point_name",
    "point_row",
    "run_sweep",
    "sweep_points",
]
