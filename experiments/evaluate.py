r"""Evaluate a trained run on a split of its data: flags in, `evaluation.evaluate_workdir` out.

    python -m experiments.evaluate --workdir=runs/fra_eng
    python -m experiments.evaluate --workdir=runs/fra_eng --split=validation
    python -m experiments.evaluate --workdir=runs/fra_eng --beam_size=4 --num_examples=500
    python -m experiments.evaluate --workdir=runs/fra_eng --average_last=3  # mean of 3 ckpts

Scores the whole test split by default: sacreBLEU and chrF with their signatures and BLEU by
source length. `--split` takes the dataset's split names (train, validation, test; fra_eng
also full) and TFDS slices such as test[:500]. Prints the Markdown report and writes it with
its JSON into the workdir (or --report_dir), named after what was scored and how (`report_name`:
eval_test.md, eval_test_n500_beam_size-4.md, ...); the run's own eval_report.{json,md} and
training_curves.png, written at the end of training, stay as they are. A refused start or a
data problem (the corpus missing, the dataset damaged, a full disk) is one `FATAL:` line, exit 2.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from absl import app, flags

from transformer_jax import launch

FLAGS = flags.FLAGS
launch.define_decoding_flags()  # --workdir, --step, --beam_size, ... (shared with translate)
launch.define_compilation_cache_flag()  # --compilation_cache_dir (as train's)
flags.DEFINE_string(
    "split",
    None,
    "Split of the run's dataset to score (train, validation, test, ...); default data.test_split.",
)
flags.DEFINE_integer("batch_size", None, "Sentences per decoding batch; default from config.")
flags.DEFINE_integer(
    "loss_batch_size",
    None,
    "Rows a batch of the loss pass (the same loss at any size); default the run's "
    "eval.loss_batch_size, else data.batch_size.",
    lower_bound=1,
)
flags.DEFINE_integer(
    "num_examples", 0, "Score n pairs evenly spaced over the split (fixed); 0 = the whole split."
)
flags.DEFINE_integer("num_samples", 10, "Sample translations shown in the report.", lower_bound=0)
flags.DEFINE_string(
    "report_dir",
    None,
    "Where to write the report; default the run's workdir (give one for a read-only run).",
)
flags.DEFINE_string(
    "data_dir",
    None,
    "Where this machine keeps (or builds) the dataset; default the run's data.data_dir (give "
    "one for a run copied from another machine, or whose data directory is read-only).",
)
flags.DEFINE_string(
    "zip_path", None, "The corpus zip on this machine; default the run's data.zip_path."
)
# The data's messages name the training launcher's flags; here they are these.
_FLAG_NAMES = {"--config.data.data_dir": "--data_dir", "--config.data.zip_path": "--zip_path"}


def main(argv: list[str]) -> None:
    launch.quiet_library_logs()  # orbax's routine INFO and read-only notices
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from transformer_jax.data.download import DownloadError, ZipNotFoundError
    from transformer_jax.evaluation.report import ReportWriteError, evaluate_workdir, report_name
    from transformer_jax.evaluation.report_text import format_report
    from transformer_jax.evaluation.translate_cli import first_workdir
    from transformer_jax.runtime import configure_process, cpu_devices
    from transformer_jax.runtime.device_memory import DeviceMemoryError, out_of_memory
    from transformer_jax.workdir.checkpoints import NoCheckpointError, load_config

    try:
        # The run's process settings (XLA flags, allocator) before JAX starts its backend.
        run = first_workdir(FLAGS.workdir)  # an ensemble's first run holds the report
        config = load_config(run)
        configure_process(config)
        cpu_devices.apply(FLAGS.cpu_devices)
        launch.use_compilation_cache(FLAGS.compilation_cache_dir)
        launch.start_backend()
        settings = {**launch.decoding_flag_values(), **launch.decoding_option_values()}
        split = FLAGS.split or config.data.test_split
        fixes = functools.partial(_memory_fixes, config)
        with out_of_memory(f"evaluating on {split}", fixes):
            report = evaluate_workdir(
                FLAGS.workdir,
                split=split,
                **settings,
                batch_size=FLAGS.batch_size,
                loss_batch_size=FLAGS.loss_batch_size,
                num_examples=FLAGS.num_examples,
                num_samples=FLAGS.num_samples,
                # Named after the pairs scored: more than the split holds is the whole split.
                name=functools.partial(report_name, split, **settings),
                report_dir=FLAGS.report_dir,
                data_dir=FLAGS.data_dir,
                zip_path=FLAGS.zip_path,
            )
    except ReportWriteError as error:  # scored, not written (a full disk): shown, not lost
        print(format_report(error.report))
        launch.fatal(str(error))
    except (
        DeviceMemoryError,
        NoCheckpointError,
        ValueError,
        DownloadError,
        ZipNotFoundError,
    ) as error:
        # One line as train gives it: the data's errors are ValueErrors (a damaged build, a
        # bad split, a corrupt or too small corpus, a full disk while building) or, for a
        # corpus that cannot be found or fetched, DownloadError and ZipNotFoundError.
        launch.fatal(_with_our_flags(str(error)))
    json_path, md_path = report["files"]
    print(Path(md_path).read_text(encoding="utf-8"))
    print(f"Report written to {md_path} and {json_path}", file=sys.stderr)


def _memory_fixes(config) -> str:
    """What an evaluation that ran out of device memory can change, with the values now."""
    batch = FLAGS.batch_size or config.eval.decode_batch_size
    beam = FLAGS.beam_size or config.eval.beam_size
    from transformer_jax.data.config import eval_rows

    # As the loss pass sizes it (before its rounding up to the devices).
    rows = eval_rows(config.data, 1, FLAGS.loss_batch_size or config.eval.get("loss_batch_size", 0))
    return (
        f"Lower --batch_size (now {batch} sentences a decoding batch), --beam_size (now "
        f"{beam}) or --loss_batch_size (now {rows} rows a batch of the loss pass)."
    )


def _with_our_flags(message: str) -> str:
    for theirs, ours in _FLAG_NAMES.items():
        message = message.replace(theirs, ours)
    return message


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    app.run(main, flags_parser=launch.flags_parser(required=("workdir",)))


if __name__ == "__main__":
    run()
