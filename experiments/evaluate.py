r"""Evaluate a trained run on a split of its data: flags in, `evaluation.evaluate_workdir` out.

    python -m experiments.evaluate --workdir=runs/fra_eng
    python -m experiments.evaluate --workdir=runs/fra_eng --split=validation
    python -m experiments.evaluate --workdir=runs/fra_eng --beam_size=4 --num_examples=500
    python -m experiments.evaluate --workdir=runs/fra_eng --average_last=3  # mean of 3 ckpts

Scores the whole test split by default: sacreBLEU and chrF with their signatures and BLEU by
source length. `--split` takes the dataset's split names (train, validation, test; fra_eng
also full) and TFDS slices such as test[:500]. Writes eval_report.json, eval_report.md and
training_curves.png into the workdir and prints the Markdown report.
"""

from __future__ import annotations

import sys

from absl import app, flags

from transformer_jax import launch

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Training workdir (config, tokenizers, checkpoints).")
flags.DEFINE_string(
    "split",
    None,
    "Split of the run's dataset to score (train, validation, test, ...); default data.test_split.",
)
flags.DEFINE_integer("step", None, "Checkpoint step; default the latest.")
flags.DEFINE_integer(
    "average_last",
    1,
    "Average the params of the last N checkpoints (ending at --step if given); 1 = no averaging.",
)
flags.DEFINE_integer("beam_size", None, "Default: the run's eval.beam_size.")
flags.DEFINE_float("alpha", None, "Beam search length penalty exponent; default eval.alpha.")
flags.DEFINE_integer(
    "max_decode_len",
    None,
    "Most tokens per translation; default eval.max_len_a * (source tokens) + eval.max_len_b.",
)
flags.DEFINE_integer(
    "split_len",
    None,
    "Translate an input of several sentences longer than this many tokens (with <eos>) in "
    "parts of whole sentences; 1 = sentence by sentence, 0 = whole; default eval.split_len.",
)
flags.DEFINE_integer("batch_size", None, "Sentences per decoding batch; default from config.")
flags.DEFINE_integer(
    "num_examples", 0, "Score n pairs evenly spaced over the split (fixed); 0 = the whole split."
)
flags.DEFINE_integer("num_samples", 10, "Sample translations shown in the report.")
flags.DEFINE_integer(
    "cpu_devices",
    0,
    "XLA:CPU devices to split each decoding batch over (the same tokens; e.g. the number of "
    "cores: 12 % faster on 2 cores); 0 = JAX's default, one. See runtime/cpu_devices.py.",
)


def main(argv: list[str]) -> None:
    launch.quiet_library_logs()  # orbax's routine INFO and read-only notices
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from transformer_jax.evaluation.report import REPORT_MD, evaluate_workdir
    from transformer_jax.runtime import configure_process, cpu_devices
    from transformer_jax.workdir.checkpoints import NoCheckpointError, load_config

    try:
        # The run's process settings (XLA flags, allocator) before JAX starts its backend.
        configure_process(load_config(FLAGS.workdir))
        cpu_devices.apply(FLAGS.cpu_devices)
        evaluate_workdir(
            FLAGS.workdir,
            split=FLAGS.split,
            step=FLAGS.step,
            average_last=FLAGS.average_last,
            beam_size=FLAGS.beam_size,
            alpha=FLAGS.alpha,
            max_decode_len=FLAGS.max_decode_len,
            split_len=FLAGS.split_len,
            batch_size=FLAGS.batch_size,
            num_examples=FLAGS.num_examples,
            num_samples=FLAGS.num_samples,
        )
    except (NoCheckpointError, ValueError) as error:
        print(f"FATAL: {error}", file=sys.stderr)
        sys.exit(2)
    from pathlib import Path

    print((Path(FLAGS.workdir) / REPORT_MD).read_text())


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    app.run(main, flags_parser=launch.flags_parser(required=("workdir",)))


if __name__ == "__main__":
    run()
