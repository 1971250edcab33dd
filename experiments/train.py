r"""Train (or resume) a model: parses flags, then calls `training.train_and_evaluate`.

    python -m experiments.train --config=configs/fra_eng.py --workdir=runs/fra_eng
    python -m experiments.train --config=configs/fra_eng.py:d2l --workdir=runs/d2l \
        --config.num_epochs=100
    python -m experiments.train --config=configs/fra_eng.py:d2l --print_config

Kept short on purpose (Flax WMT `main.py` style): all logic lives in `transformer_jax`,
where it is importable and tested. Every mistake in the flags or the config is one `FATAL:`
line before anything is built (`transformer_jax.launch`, then `training.validate_config`).
Multi-host: start one process per host with `--coordinator_address=host:port
--num_processes=N --process_id=i`.

Exit codes: 0 done; 2 a `FATAL:` line (a refused start, a fault: a NaN loss, a failed save,
a full disk, a damaged file; another trainer holds the workdir); 75
(`training.preemption.EXIT_CODE`) stopped by SIGTERM, SIGINT or SIGHUP (a closed terminal)
after saving a checkpoint, one line "Stopped by SIGTERM: saved step N; re-run the same
command to resume." (a second signal ends it at once: 143/130), or by SIGTERM before or
after the training loop (nothing is lost; during the closing report, the re-run writes it);
130 Ctrl-C before or after the training loop (nothing is lost).
"""

from __future__ import annotations

import contextlib
import os
import sys

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from transformer_jax import launch
from transformer_jax.training import distributed
from transformer_jax.training.config import ConfigError
from transformer_jax.training.preemption import EXIT_CODE, sigterm_interrupts

FLAGS = flags.FLAGS
COMPILE_LOG = "compile_log.jsonl"  # in the workdir: each launch's programs and seconds
config_flags.DEFINE_config_file(
    "config", None, "Run config file, e.g. configs/fra_eng.py:d2l.", lock_config=True
)
flags.DEFINE_string(
    "workdir",
    None,
    "Directory for checkpoints, metrics and the config, e.g. --workdir=runs/fra_eng (created "
    "if missing; re-running the same command resumes).",
)
flags.DEFINE_bool(
    "print_config", False, "Print the resolved config (overrides applied, checked) and exit."
)
flags.DEFINE_string(
    "init_from",
    None,
    "Another run's workdir: start this (new) run from its latest parameters, with a fresh "
    "optimizer and its tokenizers (a fine-tune). Used while --workdir has no checkpoint.",
)
flags.DEFINE_bool(
    "restart_from_scratch",
    False,
    "When --workdir holds a previous run but no usable checkpoint: move its metrics and "
    "TensorBoard events to previous_runs/ and train from step 0 (refused without this flag).",
)
flags.DEFINE_string("coordinator_address", "", "host:port of process 0 (multi-host only).")
flags.DEFINE_integer("num_processes", 1, "Number of processes (multi-host only).")
flags.DEFINE_integer("process_id", 0, "This process's index (multi-host only).")
launch.define_compilation_cache_flag()  # --compilation_cache_dir (as translate's)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        launch.fatal(f"unexpected arguments {argv[1:]}: write flags as --name=value.")
    # SIGTERM before or after the training loop (which saves and stops itself) unwinds as
    # Ctrl-C does, into one line below.
    with sigterm_interrupts() as outside:
        try:
            _checked_launch()
        except KeyboardInterrupt:
            rerun = _RERUN[_STAGE[0]]
            if outside.received:  # as a preemption: a restart script re-runs on 75
                print(f"Stopped by SIGTERM {_STAGE[0]}: nothing was lost{rerun}", file=sys.stderr)
                sys.exit(EXIT_CODE)
            print(f"Interrupted {_STAGE[0]}: nothing was lost{rerun}", file=sys.stderr)
            sys.exit(130)


def _checked_launch() -> None:
    """`_launch` with the workdir checked and locked; its write failures as one line."""
    from transformer_jax.workdir import lock as workdir_lock
    from transformer_jax.workdir.directory import (
        WorkdirError,
        check_workdir,
        is_disk_full,
        write_failure,
    )

    if FLAGS.print_config:
        _launch()
        return
    try:  # before anything is built: an unusable workdir is one line, not a traceback later
        check_workdir(FLAGS.workdir)
    except WorkdirError as error:
        launch.fatal(str(error))
    try:  # before the slow imports, so that a second trainer is refused at once
        with workdir_lock.hold(FLAGS.workdir, enabled=FLAGS.process_id == 0):
            _launch()
    except (workdir_lock.WorkdirLockedError, WorkdirError) as error:  # e.g. a full disk
        launch.fatal(str(error))
    except OSError as error:  # a full disk met by any other write (config.json, ...)
        if not is_disk_full(error):
            raise
        what = f"Writing {error.filename}" if error.filename else "Writing into the workdir"
        launch.fatal(write_failure(error, FLAGS.workdir, what))


# Where the launcher is outside the training loop (which saves and stops on a signal itself),
# for the line a signal there gets; and what re-running the command then does.
_STAGE = ["outside the training loop"]
_RERUN = {
    "outside the training loop": "; re-run the same command to go on.",
    "during the closing report": "; the report is not written: re-run the same command to "
    "write it.",
}


def _launch() -> None:
    """Everything after the workdir check: the config, JAX, training, the report."""
    from transformer_jax.runtime import configure_process
    from transformer_jax.training.config import validate_config

    try:  # before JAX starts, so a mistake is the only line (devices: train_and_evaluate)
        validate_config(FLAGS.config, process_count=FLAGS.num_processes)
    except ConfigError as error:
        launch.fatal(f"invalid config: {error}")
    configure_process(FLAGS.config)  # XLA flags and host memory: before JAX starts its backend
    launch.use_compilation_cache(FLAGS.compilation_cache_dir)
    distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
    launch.start_backend()
    from transformer_jax import training  # after distributed.initialize: it touches devices

    launch.quiet_library_logs()

    if FLAGS.print_config:
        try:  # the values are known good: this checks the batch against the devices
            training.validate_config(
                FLAGS.config,
                num_devices=jax.local_device_count(),
                process_count=jax.process_count(),
            )
        except ConfigError as error:
            launch.fatal(f"invalid config: {error}")
        launch.print_config(FLAGS.config)
        return
    logging.info("Config:\n%s", FLAGS.config)
    from transformer_jax.runtime import compile_log

    with compile_log.recording() as compiled:
        _train_and_report(training)
    # Every program of the run and the report; a second run of the config on this machine
    # reads them from the persistent cache (--compilation_cache_dir).
    if jax.process_index() == 0:
        compiled.append_to(os.path.join(FLAGS.workdir, COMPILE_LOG))
    print(compiled.summary_line(), flush=True)


def _train_and_report(training) -> None:
    """`train_and_evaluate`, its refusals as one FATAL line, then the closing test report."""
    from transformer_jax.data import DatasetReadError, SplitError, VocabularyMismatchError
    from transformer_jax.data.batching import DataPositionError
    from transformer_jax.data.corpus import CorruptArchiveError
    from transformer_jax.data.download import (
        ChecksumMismatchError,
        DownloadError,
        ZipNotFoundError,
    )
    from transformer_jax.evaluation.evaluators import ValidationBleu
    from transformer_jax.evaluation.report_ahead import compile_test_report
    from transformer_jax.runtime.device_memory import DeviceMemoryError
    from transformer_jax.training.finetune import InitFromError
    from transformer_jax.training.preemption import Preempted
    from transformer_jax.workdir.checkpoint_saves import CheckpointSaveError
    from transformer_jax.workdir.checkpoints import (
        NoCheckpointError,
        RunFileError,
        UnmovableCheckpointError,
    )
    from transformer_jax.workdir.directory import WorkdirError
    from transformer_jax.workdir.history import NoUsableCheckpointError
    from transformer_jax.workdir.resume import ConfigMismatchError
    from transformer_jax.workdir.state_checks import StateShapeError

    try:  # checks the devices first; a refused start changes nothing in the workdir
        training.train_and_evaluate(
            FLAGS.config,
            FLAGS.workdir,
            evaluators=[ValidationBleu],  # BLEU on validation pairs at each evaluation
            # The closing report's decoders, compiled during training (`precompile`).
            compile_ahead=[compile_test_report] if _reports_here() else [],
            init_from=FLAGS.init_from or None,
            restart_from_scratch=FLAGS.restart_from_scratch,
        )
    except ConfigError as error:
        launch.fatal(f"invalid config: {error}")
    except Preempted as error:  # the checkpoint is saved: a restart script re-runs on 75
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            print(error, file=sys.stderr, flush=True)
        sys.exit(EXIT_CODE)
    except (
        CheckpointSaveError,
        ChecksumMismatchError,  # the corpus: a download or a file that cannot be used
        ConfigMismatchError,
        CorruptArchiveError,
        DataPositionError,  # resumed with another data setup (or device count)
        DeviceMemoryError,  # the device ran out of memory: the last checkpoint is intact
        DatasetReadError,  # the built dataset: damaged, or built from another zip
        SplitError,  # a split or slice the dataset does not have
        DownloadError,
        ZipNotFoundError,
        InitFromError,
        NoCheckpointError,  # config.json unreadable
        NoUsableCheckpointError,
        RunFileError,
        StateShapeError,
        training.NonFiniteLossError,
        UnmovableCheckpointError,
        VocabularyMismatchError,
        WorkdirError,
    ) as error:
        launch.fatal(str(error))
    if FLAGS.config.eval.num_test_examples >= 0:
        if not _reports_here():  # the report decodes on one host's devices
            logging.info("Test report: run `python -m experiments.evaluate --workdir=...`.")
            return
        from transformer_jax.evaluation.report import ReportWriteError, test_report
        from transformer_jax.runtime import device_memory

        _STAGE[0] = "during the closing report"
        try:
            with device_memory.out_of_memory("in the closing test report", _report_fixes):
                test_report(FLAGS.workdir, FLAGS.config.eval.num_test_examples)
        except (ReportWriteError, DeviceMemoryError) as error:  # the model is saved
            launch.fatal(str(error))


def _report_fixes() -> str:
    """What a closing report that ran out of device memory can change (`eval.*`, which a
    finished run's command accepts: it then writes the report alone)."""
    from transformer_jax.data.config import eval_rows

    e = FLAGS.config.eval
    rows = eval_rows(FLAGS.config.data, 1, e.loss_batch_size)  # before rounding to the devices
    return (
        "The trained model is saved. Re-run the same command with a smaller "
        f"--config.eval.decode_batch_size (now {e.decode_batch_size} sentences), "
        f"--config.eval.beam_size (now {e.beam_size}) or, for its loss pass, "
        f"--config.eval.loss_batch_size (now {rows} rows): it "
        "writes the report from the last checkpoint."
    )


def _reports_here() -> bool:
    """Whether this launch ends with the test report (one process, num_test_examples >= 0)."""
    return FLAGS.config.eval.num_test_examples >= 0 and jax.process_count() == 1


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    app.run(
        main,
        flags_parser=launch.flags_parser(required=("config", "workdir"), unless="print_config"),
    )


if __name__ == "__main__":
    run()
