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
`--interactive` translates stdin one line at a time whatever it is; both engines. No input,
no output (an empty --output_file). `--output_file` is written beside the file and moved into
place when done, so a failure leaves an existing file as it was; a stream writes it in place,
each line flushed as it comes (a reader may follow it); an output that is the input (`x.txt
< x.txt`, `--input_file=x.txt --output_file=x.txt`) is refused. The output (stdout, or
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
of every translation (notes on stderr for its words outside the vocabulary and a prefix
longer than a translation may hold); `--workdir=runs/a,runs/b@4000` decodes with an ensemble
(the mean of the models' log-probabilities each step). `--engine=ctranslate2` takes the same
options through CTranslate2's own (`export.ct2_search.nbest_hypotheses`; its own random
draws, per call: a stream's samples per chunk of lines), but does not ensemble (one FATAL
line).

    python -m experiments.translate --workdir=runs/fra_eng --beam_size=4 --nbest=4 "go ."
    python -m experiments.translate --workdir=runs/fra_eng --temperature=0.8 --top_p=0.9 --seed=1
    python -m experiments.translate --workdir=runs/fra_eng --prefix="je" "i am cold ."
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from absl import app, flags

from transformer_jax import launch

FLAGS = flags.FLAGS
launch.define_decoding_flags()  # --workdir, --step, --beam_size, ... (shared with evaluate)
launch.define_compilation_cache_flag()  # --compilation_cache_dir (as train's)
flags.DEFINE_string("input_file", None, "File with one sentence per line ('-' = stdin).")
flags.DEFINE_string(
    "output_file",
    None,
    "Write the translations here (UTF-8; replaced once all are written, or in place line by "
    "line when stdin streams); default stdout.",
)
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
flags.DEFINE_integer(
    "batch_size",
    None,
    "Sentences per decoding batch (fewer: less device memory); default the run's "
    "eval.decode_batch_size.",
    lower_bound=1,
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
flags.DEFINE_integer(
    "max_notes",
    10,
    "Notes on stderr of each kind (a sentence longer than any trained on, a translation cut "
    "by its length budget, ...), then one line counting the rest; 0 = every note.",
    lower_bound=0,
)
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
    from transformer_jax.evaluation import note_limit
    from transformer_jax.evaluation.output_file import write_lines
    from transformer_jax.evaluation.translate_cli import (
        first_workdir,
        read_sentences,
        translate_stream,
        translate_workdir,
    )
    from transformer_jax.runtime import configure_process, cpu_devices
    from transformer_jax.runtime.device_memory import DeviceMemoryError, out_of_memory
    from transformer_jax.workdir.checkpoints import NoCheckpointError, load_config

    streaming = _check_input_output(argv)
    options = {
        "output_format": FLAGS.format,
        "text": FLAGS.text,
        **launch.decoding_flag_values(),
        **_decoding_options(),  # --nbest, --temperature, ..., --prefix
        "batch_size": FLAGS.batch_size,
        "attention_plot": FLAGS.attention_plot,
    }
    try:
        # The (first) run's process settings (XLA flags, allocator) before JAX starts.
        configure_process(load_config(first_workdir(FLAGS.workdir)))
        cpu_devices.apply(FLAGS.cpu_devices)
        launch.use_compilation_cache(FLAGS.compilation_cache_dir)
        launch.start_backend()
        # Out of device memory: one line; a file output keeps its old content, a stream
        # the lines already written.
        with (
            _output(streaming) as output,
            out_of_memory("translating", _memory_fixes),
            note_limit.limited(FLAGS.max_notes, sys.stderr),  # its count before a FATAL line
        ):
            if streaming:
                translate_stream(
                    FLAGS.workdir, sys.stdin, output, one_line=FLAGS.interactive, **options
                )
                return
            sentences = read_sentences(argv[1:], FLAGS.input_file, sys.stdin)
            lines = (
                translate_workdir(FLAGS.workdir, sentences, output=output, **options)
                if sentences
                else []
            )
            write_lines(lines, None, output)
    except BrokenPipeError:  # the reader left (`| head`): a stop, not a failure
        launch.stdout_closed()
    except (DeviceMemoryError, NoCheckpointError, OSError, ValueError) as error:
        launch.fatal(str(error))


def _memory_fixes() -> str:
    """What a translation that ran out of device memory can change, with the values now."""
    from transformer_jax.evaluation.translate_cli import first_workdir
    from transformer_jax.workdir.checkpoints import load_config

    run = load_config(first_workdir(FLAGS.workdir)).eval
    batch = FLAGS.batch_size or run.decode_batch_size
    beam = FLAGS.beam_size or run.beam_size
    return f"Lower --batch_size (now {batch} sentences a batch) or --beam_size (now {beam})."


def _check_input_output(argv: list[str]) -> bool:
    """Whether stdin is translated as a stream (`translate_cli.stdin_is_stream`, or
    --interactive); one FATAL line for --interactive without stdin and for an --output_file
    that is the input (`output_file.check_output_not_input`). Both engines."""
    from transformer_jax.evaluation.output_file import check_output_not_input
    from transformer_jax.evaluation.translate_cli import stdin_is_stream

    from_stdin = not argv[1:] and FLAGS.input_file in (None, "-")
    if FLAGS.interactive and not from_stdin:
        launch.fatal("--interactive reads stdin: drop the sentence arguments and --input_file.")
    if not argv[1:]:
        try:
            check_output_not_input(FLAGS.output_file, FLAGS.input_file, sys.stdin)
        except ValueError as error:
            launch.fatal(str(error))
    return from_stdin and (FLAGS.interactive or stdin_is_stream(sys.stdin))


def _decoding_options() -> dict[str, Any]:
    """`launch.decoding_option_values()`, a --prefix's bytes that were not UTF-8 replaced
    (`text_lines.argument_text`) with a warning, as a sentence argument's."""
    from transformer_jax.evaluation.text_lines import argument_text

    options = launch.decoding_option_values()
    if options.get("prefix"):
        options["prefix"], valid = argument_text(options["prefix"])
        if not valid:
            print(
                "warning: --prefix not valid UTF-8; invalid bytes replaced by U+FFFD "
                "(give UTF-8 text to avoid this).",
                file=sys.stderr,
            )
    return options


@contextlib.contextmanager
def _output(streaming: bool) -> Iterator[TextIO]:
    """--output_file opened for writing (`output_file.open_output`: moved into place when
    done; in place when `streaming`), else stdout (left open). A path that cannot be
    written is one FATAL line, before anything is decoded."""
    from transformer_jax.evaluation.output_file import open_output

    if not FLAGS.output_file:
        yield sys.stdout
        return
    with contextlib.ExitStack() as stack:
        try:
            output = stack.enter_context(open_output(FLAGS.output_file, stream=streaming))
        except OSError as error:
            launch.fatal(f"--output_file={FLAGS.output_file}: {error.strerror or error}.")
        yield output


def _main_ctranslate2(argv: list[str]) -> None:
    from transformer_jax.evaluation import note_limit
    from transformer_jax.evaluation.output_file import write_lines
    from transformer_jax.evaluation.stream_encoding import check_translations_fit, output_characters
    from transformer_jax.evaluation.translate_cli import (
        read_sentences,
        stream_lines,
    )
    from transformer_jax.export.ct2_translate import (
        ENSEMBLE_ERROR,
        load_truecaser,
        open_translator,
        target_tokenizer,
    )
    from transformer_jax.export.extras import MissingExtraError

    if not FLAGS.model_dir:
        launch.fatal(f"--model_dir is missing: {FLAGS['model_dir'].help}")
    if "," in FLAGS.model_dir or "," in (FLAGS.workdir or ""):  # several models
        launch.fatal(f"{ENSEMBLE_ERROR}.")
    weights = (
        "a CTranslate2 export holds one set of weights: export an averaged or earlier "
        "checkpoint instead"
    )
    reasons = {
        "workdir": "the CTranslate2 engine reads the export in --model_dir",
        "step": weights,
        "average_last": weights,
        "attention_plot": "the CTranslate2 engine does not return attention weights",
    }
    unsupported = [
        f"--{name} applies to --engine=jax only ({reason})"
        for name, reason in reasons.items()
        if FLAGS[name].value != FLAGS[name].default
    ]
    if unsupported:
        launch.fatal("; ".join(unsupported) + ".")
    streaming = _check_input_output(argv)
    options = _decoding_options()  # --nbest, --temperature, ..., --prefix
    try:
        # The output opened before decoding: a bad path fails now.
        with _output(streaming) as output, note_limit.limited(FLAGS.max_notes, sys.stderr):
            translator = open_translator(FLAGS.model_dir)  # loaded once for every chunk
            truecaser = load_truecaser(FLAGS.model_dir) if FLAGS.text == "natural" else None
            natural = truecaser.natural if truecaser is not None else None
            # Before decoding: a stdout that cannot hold the model's characters.
            characters = output_characters(target_tokenizer(FLAGS.model_dir), truecaser)
            check_translations_fit(output, characters)
            translate = _ct2_lines(translator, natural, options)
            if streaming:
                stream_lines(sys.stdin, output, translate, one_line=FLAGS.interactive)
                return
            sentences = read_sentences(argv[1:], FLAGS.input_file, sys.stdin)
            write_lines(translate(sentences, 1) if sentences else [], None, output)
    except BrokenPipeError:  # the reader left (`| head`): a stop, not a failure
        launch.stdout_closed()
    except (MissingExtraError, OSError, ValueError) as error:  # one FATAL line
        launch.fatal(str(error))


def _ct2_lines(
    translator: Any, natural: Callable[[str, str], str] | None, options: dict[str, Any]
) -> Callable[[list[str], int], list[str]]:
    """translate(sentences, first_number) -> output lines with the CTranslate2 export, its
    notes (the JAX engine's, sentences numbered from first_number; the prefix's with the
    first line's) on stderr: what `translate_cli.translate_workdir` is to the JAX engine."""
    from transformer_jax.evaluation import note_limit
    from transformer_jax.evaluation.translate_cli import format_lines, nbest_lines
    from transformer_jax.export.ct2_translate import translate_detailed
    from transformer_jax.inference.notes import prefix_notes

    def translate(sentences: list[str], first_number: int) -> list[str]:
        out = translate_detailed(
            FLAGS.model_dir,
            sentences,
            translator=translator,
            beam_size=FLAGS.beam_size,  # None: the run's, from export.json
            segment_len=FLAGS.segment_len,  # None: the run's, from export.json
            alpha=FLAGS.alpha,  # None: the run's α, ranked as the JAX engine ranks
            max_decode_len=FLAGS.max_decode_len,
            scores=FLAGS.nbest is not None,
            **options,
        )
        notes = out.notes(first_number)  # the JAX engine's notes (inference.notes)
        if first_number == 1 and out.prefixes and out.prefixes[0]:
            notes += prefix_notes(
                out.prefixes[0],
                out.tgt_tokenizer,
                max_decode_len=out.max_decode_len,
                position_limit=out.max_positions,
                table="the export's position table",
            )
        note_limit.emit(notes, sys.stderr)
        if FLAGS.nbest is not None:
            return nbest_lines(sentences, out.hypotheses, natural, first_index=first_number - 1)
        return format_lines(sentences, out.texts, FLAGS.format, natural)

    return translate


def run() -> None:
    """The console command (pyproject's [project.scripts]) and `python -m` entry point."""
    # Strict stdout: the translations are checked to fit its encoding before decoding.
    app.run(main, flags_parser=launch.flags_parser(lenient_stdout_encoding=False))


if __name__ == "__main__":
    run()
