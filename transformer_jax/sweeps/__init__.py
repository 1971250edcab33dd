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
        "transformer_jax.sweeps.runner": [
            "PointFailed",
            "SweepError",
            "SweepPoint",
            "check_launcher_flags",
            "check_saved_configs",
            "check_sweep_dir",
            "default_sweep_dir",
            "point_name",
            "run_sweep",
            "shipped_sweeps",
            "sweep_points",
            "validate_points",
        ],
    },
)
