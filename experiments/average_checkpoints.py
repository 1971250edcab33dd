r"""Average a run's last N checkpoints into a new workdir: flags in,
`workdir.averaging.write_averaged_checkpoint` out.

    python -m experiments.average_checkpoints --workdir=runs/fra_eng --last=3
    python -m experiments.evaluate --workdir=runs/fra_eng_avg3

The new workdir (default `<workdir>_avg<N>`) holds the run's config and tokenizers and one
checkpoint with the averaged params; evaluate and translate read it like any workdir. To
score an average without writing one, pass `--average_last=N` to those commands instead.
"""

from __future__ import annotations

from absl import app, flags

from transformer_jax import launch
from transformer_jax.runtime import commands

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Training workdir whose checkpoints to average.")
flags.DEFINE_integer(
    "last", 3, "How many of the newest checkpoints to average (a run keeps keep_checkpoints=3)."
)
flags.DEFINE_string("output_workdir", None, "Where to write; default <workdir>_avg<last>.")


def main(argv: list[str]) -> None:
    launch.quiet_library_logs()  # orbax's routine INFO and read-only notices
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from transformer_jax.inference import Translator
    from transformer_jax.training.state import abstract_run_state
    from transformer_jax.workdir.averaging import write_averaged_checkpoint
    from transformer_jax.workdir.checkpoints import NoCheckpointError

    launch.start_backend()
    output = FLAGS.output_workdir or f"{FLAGS.workdir.rstrip('/')}_avg{FLAGS.last}"
    try:
        written = write_averaged_checkpoint(
            FLAGS.workdir,
            FLAGS.last,
            output,
            abstract_state=abstract_run_state(FLAGS.workdir),  # the model's and optimizer's
        )
    except (NoCheckpointError, ValueError) as error:  # too few checkpoints, a bad output
        launch.fatal(str(error))
    except OSError as error:  # e.g. no permission to write beside --output_workdir
        launch.fatal(f"cannot write the average to {output}: {error}.")
    # Read back as evaluate will: proves the new workdir loads, and names the steps it holds.
    steps = Translator.from_workdir(written).averaged_steps
    print(f"Wrote the average of the checkpoints at steps {list(steps)} to {written}.")
    print(f"Evaluate it with: {commands.command('evaluate', workdir=written)}")


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    app.run(main, flags_parser=launch.flags_parser(required=("workdir",)))


if __name__ == "__main__":
    run()
