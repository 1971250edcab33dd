r"""Run a config sweep: every point in its own workdir under --sweep_dir, then a results table.

    python -m experiments.sweep --config=configs/fra_eng.py:d2l --sweep=norm_x_attention
    python -m experiments.sweep ... --dry_run      # check every point, print the commands

The default --sweep_dir is runs/sweeps/<config file>-<variant>/<sweep>. Before anything
runs, every point's config is resolved and validated, `--extra` may not set a key the sweep
varies (nor pass a flag the train launcher does not take), and a workdir holding a run of
another config is refused. Re-running skips finished points and resumes unfinished ones. A
failed point is recorded and the others still run; the sweep then exits with status 1.
Results go to results.csv, results.md and results.png in the sweep directory. Ctrl-C or
SIGTERM stops the running point as the train launcher stops (its checkpoint saved) and
exits with its code (75); a second one stops it at once. One sweep at a time runs in a
sweep directory.
"""

from __future__ import annotations

import contextlib
import sys

from absl import app, flags, logging

from transformer_jax import launch, sweeps

flags.DEFINE_string("config", None, "Config file with get_hyper, e.g. configs/fra_eng.py:d2l.")
flags.DEFINE_string(
    "sweep",
    None,
    "Name of the sweep defined by the config's get_hyper; the shipped configs': "
    + "; ".join(f"{c}: {', '.join(names)}" for c, names in sweeps.shipped_sweeps().items())
    + ".",
)
flags.DEFINE_string(
    "sweep_dir", None, "Directory holding one workdir per point (default: runs/sweeps/...)."
)
flags.DEFINE_bool("dry_run", False, "Check every point's config, print the launch commands.")
flags.DEFINE_multi_string(
    "extra", [], "Extra flags for every point, e.g. --extra=--config.num_epochs=10."
)
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    sweep_dir = FLAGS.sweep_dir or sweeps.default_sweep_dir(FLAGS.config, FLAGS.sweep)
    try:  # every config mistake ends here, before any point runs
        points = sweeps.sweep_points(FLAGS.config, FLAGS.sweep, sweep_dir, FLAGS.extra)
        import jax

        logging.set_verbosity(logging.WARNING)  # not JAX's INFO lines about absent backends
        # This machine's devices, as each point's run sees them (batch splits are checked).
        sweeps.validate_points(points, num_devices=jax.local_device_count())
        sweeps.check_saved_configs(points)
        sweeps.check_result_paths(sweep_dir)
        sweeps.check_launcher_flags(points, FLAGS.extra)
    except (ValueError, FileNotFoundError) as error:
        print(f"FATAL: {error}", file=sys.stderr)  # a list of points follows on its lines
        sys.exit(2)
    if FLAGS.dry_run:
        sweeps.run_sweep(points, dry_run=True)
        print(f"# {len(points)} point configs valid; sweep dir {sweep_dir}", file=sys.stderr)
        return
    try:
        sweeps.run_sweep(points)
        rows = sweeps.gather(points, sweep_dir)
    except sweeps.SweepInterrupted as stop:  # nothing recorded as failed: all resumable
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            print(stop, file=sys.stderr)
        sys.exit(stop.exit_code)
    except ValueError as error:  # another sweep holds the folder; a results file unwritable
        launch.fatal(str(error))
    keys = list(dict.fromkeys(k for p in points for k in p.overrides))
    header = [
        "point",
        *keys,
        "status",
        "eval_loss",
        "bleu",
        "wall_time_s",
        "attempts",
        "tokens_per_sec",
    ]
    print(sweeps.markdown_table(rows, header))
    failed = [p for p in points if p.failure is not None]
    if failed:
        print(
            f"FAILED: {len(failed)} of {len(points)} sweep points: "
            + "; ".join(f"{p.name} ({p.workdir / sweeps.points.LOG_FILE})" for p in failed)
            + ". Re-run the same command to retry them.",
            file=sys.stderr,
        )
        sys.exit(1)
    print(f"Results: {sweep_dir}/results.md, results.csv, results.png")


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    app.run(main, flags_parser=launch.flags_parser(required=("config", "sweep")))


if __name__ == "__main__":
    run()
