r"""Run a config sweep: every point in its own workdir under --sweep_dir, then a results table.

    python -m experiments.sweep --config=configs/fra_eng.py:d2l --sweep=norm_x_attention \
        --sweep_dir=runs/sweeps/norm_x_attention
    python -m experiments.sweep ... --dry_run      # print the launch commands only

Re-running skips finished points and resumes unfinished ones. Results go to
results.csv, results.md and results.png in the sweep directory.
"""

from __future__ import annotations

from absl import app, flags

from transformer_jax import sweeps

flags.DEFINE_string("config", None, "Config file with get_hyper, e.g. configs/fra_eng.py:d2l.")
flags.DEFINE_string("sweep", None, "Name of the sweep defined by the config's get_hyper.")
flags.DEFINE_string("sweep_dir", None, "Directory holding one workdir per point.")
flags.DEFINE_bool("dry_run", False, "Print the launch commands instead of running them.")
flags.DEFINE_multi_string("extra", [], "Extra flags for every point, e.g. --extra=--config.x=1.")
flags.mark_flags_as_required(["config", "sweep"])
FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    sweep_dir = FLAGS.sweep_dir or f"runs/sweeps/{FLAGS.sweep}"
    points = sweeps.sweep_points(FLAGS.config, FLAGS.sweep, sweep_dir, FLAGS.extra)
    sweeps.run_sweep(points, dry_run=FLAGS.dry_run)
    if not FLAGS.dry_run:
        rows = sweeps.gather(points, sweep_dir)
        keys = list(dict.fromkeys(k for p in points for k in p.overrides))
        print(
            sweeps.markdown_table(
                rows, ["point", *keys, "eval_loss", "bleu", "wall_time_s", "tokens_per_sec"]
            )
        )


if __name__ == "__main__":
    app.run(main)
