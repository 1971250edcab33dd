r"""Translate sentences with a trained run: flags in, `evaluation.translate_workdir` out.

    python -m experiments.translate --workdir=runs/fra_eng "go ." "i lost ."
    python -m experiments.translate --workdir=runs/fra_eng --beam_size=4 < in.txt > out.txt
    python -m experiments.translate --workdir=runs/fra_eng --input_file=in.txt \
        --format=tsv --output_file=out.tsv --attention_plot=attention.png
    python -m experiments.translate --engine=ctranslate2 --model_dir=exports/fra_eng_ct2 < in.txt

`--engine=ctranslate2` translates with a CTranslate2 export (`experiments.export
--format=ctranslate2`; no JAX compilation), with the same input and output behaviour and the
run's decoding settings (recorded at export: beam size, length penalty α, output budget),
the same ranking of beam hypotheses and the same notes on stderr, so the same translations.

Sentences come from the command line (one per argument, even across a newline), else
`--input_file` (one per line, split on `\n` only), else stdin. Stdin that is a file
(`< in.txt`) is read whole and decoded in batches; a pipe or a terminal is translated as its
lines arrive, each translation written and flushed at once (so translate can run as a
co-process; lines already waiting are decoded together), with a prompt on a terminal;
`--interactive` translates stdin one line at a time whatever it is. No input, no output
(an empty --output_file). The output (stdout, or
`--output_file`) has exactly one line per sentence, in order: the translation (an empty line
for an empty input), or with `--format=tsv` the source, a tab and the translation. A
book-style run (fra_eng) trains on lowercased text with spaced punctuation; translations are
printed as text to read ("Je pense que Tom a raison.": `data.truecasing`), or with
`--text=data` as the model wrote them ("je pense que tom a raison ."). Notes and
warnings (invalid UTF-8, over-long inputs) go to stderr.

Decoding options: `--nbest=N` writes N lines per input instead, TSV
`line_index<TAB>rank<TAB>score<TAB>translation` (line_index from 0, rank 1 = the best, score
log P / ((5 + len) / 6)^alpha as the search ranks them); `--temperature` > 0 samples (with
`--top_k`, `--top_p`, `--seed`; `--nbest=N` then draws N samples); `--prefix` forces the start
of every translation; `--workdir=runs/a,runs/b@4000` decodes with an ensemble (the mean of the
models' log-probabilities each step). `--engine=ctranslate2` takes the same options through
CTranslate2's own (`export.ct2_translate.nbest_hypotheses`; its own random draws), but does not
ensemble (one FATAL line).

    python -m experiments.translate --workdir=runs/fra_eng --beam_size=4 --nbest=4 "go ."
    python -m experiments.translate --workdir=runs/fra_eng --temperature=0.8 --top_p=0.9 --seed=1
    python -m experiments.translate --workdir=runs/fra_eng --prefix="je" "i am cold ."
"""

from __future__ import annotations

import contextlib
import sys
from typing import TextIO

from absl import app, flags

from transformer_jax import launch

FLAGS = flags.FLAGS
launch.define_decoding_flags()  # --workdir, --step, --beam_size, ... (shared with evaluate)
flags.DEFINE_string("input_file", None, "File with one sentence per line ('-' = stdin).")
flags.DEFINE_string("output_file", None, "Write the translations here (UTF-8); default stdout.")
flags.DEFINE_enum(
    "format", "plain", ["plain", "tsv"], "plain: the translation; tsv: source<TAB>translation."
)
flags.DEFINE_enum(
    "text",
    "natural",
    ["natural", "data"],
    'natural: punctuation joined and capitals restored ("Je pense que Tom a raison."); '
    "data: the model's own form, as the data stores text and evaluate scores it "
    '("je pense que tom a raison .").',
)
flags.DEFINE_string("attention_plot", None, "PNG for the first sentence's attention heatmaps.")
flags.DEFINE_enum(
    "engine",
    "jax",
    ["jax", "ctranslate2"],
    "jax: the checkpoint in --workdir; ctranslate2: "
    "the CTranslate2 export in --model_dir (experiments.export --format=ctranslate2).",
)
flags.DEFINE_string("model_dir", None, "CTranslate2 export directory (--engine=ctranslate2).")
flags.DEFINE_bool(
    "interactive",
    False,
    "Translate stdin one line at a time, each written and flushed before the next is read "
    "(a pipe or terminal is already translated as its lines arrive, those waiting together).",
)


def main(argv: list[str]) -> None:
    launch.quiet_library_logs()  # orbax's routine INFO and read-only notices
    if FLAGS.engine == "ctranslate2":
        return _main_ctranslate2(argv)
    if not FLAGS.workdir:
        launch.fatal(f"--workdir is missing: {FLAGS['workdir'].help}")
    from transformer_jax.evaluation.translate_cli import (
        first_workdir,
        read_sentences,
        stdin_is_stream,
        translate_stream,
        translate_workdir,
        write_lines,
    )
    from transformer_jax.runtime import configure_process, cpu_devices
    from transformer_jax.workdir.checkpoints import NoCheckpointError, load_config

    from_stdin = not argv[1:] and FLAGS.input_file in (None, "-")
    if FLAGS.interactive and not from_stdin:
        launch.fatal("--interactive reads stdin: drop the sentence arguments and --input_file.")
    options = {
        "output_format": FLAGS.format,
        "text": FLAGS.text,
        **launch.decoding_flag_values(),
        **launch.decoding_option_values(),  # --nbest, --temperature, ..., --prefix
        "attention_plot": FLAGS.attention_plot,
    }
    try:
        # The (first) run's process settings (XLA flags, allocator) before JAX starts.
        configure_process(load_config(first_workdir(FLAGS.workdir)))
        cpu_devices.apply(FLAGS.cpu_devices)
        with _output() as output:  # opened before decoding: a bad path fails now
            if from_stdin and (FLAGS.interactive or stdin_is_stream(sys.stdin)):
                translate_stream(
                    FLAGS.workdir, sys.stdin, output, one_line=FLAGS.interactive, **options
                )
                return
            sentences = read_sentences(argv[1:], FLAGS.input_file, sys.stdin)
            lines = translate_workdir(FLAGS.workdir, sentences, **options) if sentences else []
            write_lines(lines, None, output)
    except BrokenPipeError:  # the reader left (`| head`): a stop, not a failure
        launch.stdout_closed()
    except (NoCheckpointError, OSError, ValueError) as error:
        launch.fatal(str(error))


def _output() -> contextlib.AbstractContextManager[TextIO]:
    """--output_file opened for writing (UTF-8, "\n" line ends), else stdout (left open)."""
    if not FLAGS.output_file:
        return contextlib.nullcontext(sys.stdout)
    try:
        return open(FLAGS.output_file, "w", encoding="utf-8", newline="\n")
    except OSError as error:
        launch.fatal(f"--output_file={FLAGS.output_file}: {error.strerror or error}.")


def _main_ctranslate2(argv: list[str]) -> None:
    from transformer_jax.evaluation.translate_cli import (
        format_lines,
        nbest_lines,
        read_sentences,
        write_lines,
    )
    from transformer_jax.export.ct2_translate import (
        ENSEMBLE_ERROR,
        load_truecaser,
        translate_detailed,
    )
    from transformer_jax.export.extras import MissingExtraError

    if not FLAGS.model_dir:
        launch.fatal(f"--model_dir is missing: {FLAGS['model_dir'].help}")
    if "," in FLAGS.model_dir or "," in (FLAGS.workdir or ""):  # several models
        launch.fatal(f"{ENSEMBLE_ERROR}.")
    unsupported = [
        f"--{name}"
        for name in ("workdir", "step", "attention_plot")
        if FLAGS[name].value is not None
    ]
    if FLAGS.average_last != 1:
        unsupported.append("--average_last")
    if FLAGS.interactive:
        unsupported.append("--interactive")
    if unsupported:
        launch.fatal(
            f"{', '.join(unsupported)} apply to --engine=jax only; a CTranslate2 export holds "
            "one set of weights (export an averaged or earlier checkpoint instead)."
        )
    try:
        sentences = read_sentences(argv[1:], FLAGS.input_file, sys.stdin)
        if not sentences:  # no input, no output
            return write_lines([], FLAGS.output_file, sys.stdout)
        out = translate_detailed(
            FLAGS.model_dir,
            sentences,
            beam_size=FLAGS.beam_size,  # None: the run's, from export.json
            segment_len=FLAGS.segment_len,  # None: the run's, from export.json
            alpha=FLAGS.alpha,  # None: the run's α, ranked as the JAX engine ranks
            max_decode_len=FLAGS.max_decode_len,
            scores=FLAGS.nbest is not None,
            **launch.decoding_option_values(),  # --nbest, --temperature, ..., --prefix
        )
        for note in out.notes():  # the JAX engine's notes (inference.notes)
            print(note, file=sys.stderr)
        texts = out.texts
        truecaser = load_truecaser(FLAGS.model_dir) if FLAGS.text == "natural" else None
        natural = truecaser.natural if truecaser is not None else None
        if FLAGS.nbest is not None:
            lines = nbest_lines(sentences, out.hypotheses, natural)
        else:
            lines = format_lines(sentences, texts, FLAGS.format, natural)
        write_lines(lines, FLAGS.output_file, sys.stdout)
    except BrokenPipeError:  # the reader left (`| head`): a stop, not a failure
        launch.stdout_closed()
    except (MissingExtraError, OSError, ValueError) as error:  # one FATAL line
        launch.fatal(str(error))


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    app.run(main, flags_parser=launch.flags_parser())


if __name__ == "__main__":
    run()
