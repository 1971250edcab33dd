"""Export a trained model for serving without this package's training code.

    python -m experiments.export --workdir=runs/fra_eng --format=ctranslate2 \\
        --output_dir=runs/fra_eng_ct2 [--quantization=int8]
    python -m experiments.export --workdir=runs/fra_eng --format=stablehlo \\
        --output_dir=runs/fra_eng_hlo

The logic lives in `transformer_jax.export`; this file only parses flags.
"""

from __future__ import annotations

from absl import app, flags

from transformer_jax import launch

FORMATS = ("ctranslate2", "stablehlo")

_WORKDIR = flags.DEFINE_string("workdir", None, "Training run to export.", required=True)
_FORMAT = flags.DEFINE_enum("format", "ctranslate2", FORMATS, "Export format.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Directory to write.", required=True)
_QUANTIZATION = flags.DEFINE_string(
    "quantization", None, "ctranslate2 only: weight quantisation, e.g. int8 (default float32)."
)
_MAX_POSITIONS = flags.DEFINE_integer(
    "max_positions", 1024, "ctranslate2 only: rows of the sinusoidal position table."
)
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
_FORCE = flags.DEFINE_bool(
    "force", False, "Replace an --output_dir that holds an earlier export (or is empty)."
)


def main(argv: list[str]) -> None:
    launch.quiet_library_logs()  # orbax's routine INFO and read-only notices
    del argv
    if _FORMAT.value != "ctranslate2" and _QUANTIZATION.value:
        launch.fatal(
            f"--quantization applies to --format=ctranslate2 only; drop it to export "
            f"--format={_FORMAT.value} (its programs keep the model's own precision)."
        )
    from transformer_jax.export.ctranslate2 import export_ctranslate2
    from transformer_jax.export.extras import MissingExtraError
    from transformer_jax.export.stablehlo import export_stablehlo

    launch.start_backend()
    # No run in --workdir (NoCheckpointError), an --output_dir that --force may not replace
    # (a file, the run, a directory that no export wrote), a library missing: one FATAL line.
    try:
        if _FORMAT.value == "ctranslate2":
            out = export_ctranslate2(
                _WORKDIR.value,
                _OUTPUT_DIR.value,
                quantization=_QUANTIZATION.value,
                max_positions=_MAX_POSITIONS.value,
                step=_STEP.value,
                force=_FORCE.value,
            )
        else:
            out = export_stablehlo(
                _WORKDIR.value, _OUTPUT_DIR.value, step=_STEP.value, force=_FORCE.value
            )
    except (MissingExtraError, OSError, ValueError) as error:
        launch.fatal(str(error))
    print(f"Exported {_WORKDIR.value} as {_FORMAT.value} to {out}")


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    app.run(main, flags_parser=launch.flags_parser(required=()))


if __name__ == "__main__":
    run()
