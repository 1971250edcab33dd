"""Config sweeps: `get_hyper(h, name)` definitions, a resumable runner, gathered results."""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.sweeps": ["hyper"],
        "transformer_jax.sweeps.child": ["SweepInterrupted"],
        "transformer_jax.sweeps.lock": ["SweepLockedError"],
        "transformer_jax.sweeps.results": [
            "check_result_paths",
            "gather",
            "markdown_table",
            "point_row",
        ],
        "transformer_jax.sweeps.points": [
            "SweepError",
            "SweepPoint",
            "check_sweep_dir",
            "default_sweep_dir",
            "point_name",
            "shipped_sweeps",
            "sweep_points",
        ],
        "transformer_jax.sweeps.runner": [
            "PointFailed",
            "check_launcher_flags",
            "check_saved_configs",
            "run_sweep",
            "validate_points",
        ],
    },
)
