"""What `python -m experiments.translate` does, as testable functions.

    sentences = read_sentences([], "in.txt")                     # one per line
    lines = translate_workdir("runs/fra_eng", sentences)         # one output line each
    write_lines(lines, "out.txt")                                # or stdout

Output formats (`FORMATS`): "plain" is the translation alone, an empty line for an empty
input, so that `paste in.txt out.txt` lines them up; "tsv" is `source<TAB>translation`.
Text styles (`TEXT_STYLES`): "natural" (the default) gives a book-style run's translations as
text to read, punctuation joined and capitals restored (`Translator.natural`,
`data.truecasing`: "Je pense que Tom a raison."); "data" the model's own form, as the data
stores text and evaluate scores it ("je pense que tom a raison .").
Everything else (the stdin prompt, invalid UTF-8, inputs longer than the model was trained
on, a prefix the model cannot write as given, where the attention plot went) is said on
stderr, never mixed into the output. Output files: `evaluation.output_file`.
"""

from __future__ import annotations

import os
import select
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from absl import logging

from transformer_jax.data.text_form import clean_text
from transformer_jax.decoding.batch_decode import position_limit
from transformer_jax.decoding.options import Hypotheses
from transformer_jax.evaluation import note_limit
from transformer_jax.evaluation.output_file import write_lines
from transformer_jax.evaluation.progress import progress_bar
from transformer_jax.evaluation.stream_encoding import check_translations_fit, output_characters
from transformer_jax.evaluation.text_lines import argument_text, decode_lines
from transformer_jax.inference import Translator, load_translator, split_checkpoint
from transformer_jax.inference.notes import output_notes, prefix_notes, source_notes
from transformer_jax.inference.run_specs import split_workdirs

FORMATS = ("plain", "tsv")
TEXT_STYLES = ("natural", "data")
STDIN_PROMPT = "Reading sentences from stdin, one per line; end with Ctrl-D (Windows: Ctrl-Z)."
TERMINAL_PROMPT = "Type a sentence and press Enter for its translation; Ctrl-D ends."
LINE_PROMPT = "> "


def read_sentences(
    args: Sequence[str],
    input_file: str | None = None,
    stdin: TextIO | None = None,
    *,
    stderr: TextIO | None = None,
) -> list[str]:
    """Sentences from the command line, else from `input_file` ("-" = stdin), else stdin.

    Each argument is one sentence, even if it holds a newline (line breaks become spaces in
    `translate_workdir`). A file or stdin holds one sentence per line, split on `\\n` only
    (`\\r\\n` accepted; `text_lines.split_lines`): one output per input line, in order, blank
    lines included. A line that is not valid UTF-8 is decoded with replacement characters and
    named in a warning on `stderr` (default sys.stderr); every line is still returned (an
    argument's bytes likewise: `text_lines.argument_text`); a byte-order mark that starts the
    input is dropped. When
    stdin is a terminal, `STDIN_PROMPT` goes to `stderr` first, so the wait is explained.
    """
    stderr = stderr or sys.stderr
    if args:  # bytes that were not UTF-8 (surrogateescape'd by Python) decoded as a file's
        checked = [argument_text(a) for a in args]
        invalid = [n for n, (_, valid) in enumerate(checked, 1) if not valid]
        _warn_invalid("the command line", invalid, stderr, "argument")
        return [text for text, _ in checked]
    if input_file and input_file != "-":
        data, where = Path(input_file).read_bytes(), input_file
    elif stdin is not None:
        if stdin.isatty():
            print(STDIN_PROMPT, file=stderr, flush=True)
        # The bytes: a text-mode sys.stdin turns a lone "\r" into a line break of its own,
        # and raises on the first invalid byte.
        buffer = getattr(stdin, "buffer", None)
        data, where = (buffer.read() if buffer else stdin.read().encode("utf-8")), "stdin"
    else:
        return []
    lines, invalid = decode_lines(data)
    _warn_invalid(where, invalid, stderr)
    return lines


def _warn_invalid(where: str, invalid: Sequence[int], stderr: TextIO, what: str = "line") -> None:
    """Names the lines (or arguments: `what`; numbers from 1) that were not valid UTF-8."""
    if invalid:
        which = ", ".join(map(str, invalid[:10])) + (" ..." if len(invalid) > 10 else "")
        noun = what if len(invalid) == 1 else f"{what}s"
        print(
            f"warning: {where}: {noun} {which} not valid UTF-8; invalid bytes replaced by "
            "U+FFFD and translated anyway "
            f"({'save the input as UTF-8' if what == 'line' else 'give UTF-8 text'} to avoid "
            "this).",
            file=stderr,
            flush=True,
        )


def check_format(output_format: str, text: str = "natural") -> str:
    """`output_format` if it is one of `FORMATS` and `text` one of `TEXT_STYLES`, else a
    ValueError listing them."""
    if output_format not in FORMATS:
        raise ValueError(f"--format={output_format!r}; choose one of {', '.join(FORMATS)}.")
    if text not in TEXT_STYLES:
        raise ValueError(f"--text={text!r}; choose one of {', '.join(TEXT_STYLES)}.")
    return output_format


def format_lines(
    sources: Sequence[str],
    translations: Sequence[str],
    output_format: str = "plain",
    natural: Callable[[str, str], str] | None = None,
) -> list[str]:
    """One printable line per sentence: the translation ("plain"), or source TAB translation
    ("tsv"). Control characters (a tab included) of either side become spaces. `natural`
    (translation, source) -> text to read, e.g. `Translator.natural`, is applied first."""
    check_format(output_format)
    out = [clean_text(t).strip() for t in translations]
    if natural is not None:
        out = [natural(t, clean_text(s)) for s, t in zip(sources, out, strict=True)]
    if output_format == "tsv":
        out = [f"{clean_text(s).strip()}\t{t}" for s, t in zip(sources, out, strict=True)]
    return out


def first_workdir(workdir: str) -> str:
    """The run directory of `--workdir` (its first, for an ensemble `a,b`; without `@STEP`):
    whose config sets the process (XLA flags) and names the report."""
    return split_checkpoint(split_workdirs(workdir)[0])[0]


def translate_workdir(
    workdir: str | Path,
    sentences: Sequence[str],
    *,
    output_format: str = "plain",
    text: str = "natural",
    step: int | None = None,
    average_last: int = 1,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_decode_len: int | None = None,
    segment_len: int | None = None,
    batch_size: int | None = None,
    attention_plot: str | Path | None = None,
    translator: Translator | None = None,
    stderr: TextIO | None = None,
    first_number: int = 1,
    progress: bool | None = None,
    nbest: int | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    prefix: str | None = None,
    output: TextIO | None = None,
) -> list[str]:
    """Translate `sentences` with the run in `workdir` (comma-separated workdirs, each
    `dir` or `dir@STEP`: an ensemble, `inference.load_translator`); returns one output line
    each, or with `nbest` N lines each (`nbest_lines`).

    Inputs are prepared as the run's data (`Translator.prepare`: control characters out,
    the book's lowercasing and punctuation spacing for fra_eng). Lines are formatted by
    `format_lines`, as natural text (`text="natural"`: `Translator.natural`) or as the model
    wrote them (`text="data"`); an empty input gives an empty translation. An input of several
    sentences is translated in parts cut at sentence ends (`segment_len`, default the run's
    `eval.segment_len`: sentence by sentence); a sentence longer than the training limit is
    translated whole and noted on `stderr`, as are words the source vocabulary reads as
    `<unk>` (`inference.notes.source_notes`). Decoding settings not given come from the run
    config (`batch_size`: sentences a decoding batch, the run's eval.decode_batch_size). With
    `attention_plot`, the attention heatmaps of the first non-empty input and
    its translation (the whole input, never in parts) are written there as a PNG (noted in
    the log). Notes number the sentences from `first_number` (a stream's later lines); the
    notes on a prefix (`prefix_notes`) come with the first line's. A
    decoding that takes more than a few seconds shows a progress bar on `stderr` when it is a
    terminal (`progress`: True always, False never; `evaluation.progress`).
    `decoding.options.DecodeOptions` fields (nbest, temperature, top_k, top_p, seed, prefix:
    raw text, prepared as the inputs) left None are the defaults. `output`: the stream the
    lines will be written to (stdout, or an --output_file's); one whose encoding cannot hold
    what the model may write is refused before decoding (`check_output`).
    """
    check_format(output_format, text)
    stderr = stderr or sys.stderr
    translator = translator or load_translator(workdir, step, average_last=average_last)
    if output is not None:
        check_output(translator, output, text, sentences if output_format == "tsv" else ())
    prepared = [translator.prepare(s) for s in sentences]
    with progress_bar("Translating", file=stderr, enabled=progress) as update:
        out = translator.translate_detailed(
            prepared,
            warn=False,  # reported below, per line
            progress=update,
            scores=nbest is not None,
            beam_size=beam_size,
            alpha=alpha,
            max_decode_len=max_decode_len,
            segment_len=segment_len,
            batch_size=batch_size,
            nbest=nbest,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seed=seed,
            prefix=translator.prepare(prefix, target=True) if prefix else None,
            # A line samples by its number in the whole input: a stream's chunks as the file.
            sample_ids=range(first_number - 1, first_number - 1 + len(prepared)),
        )
    trained_len = translator.settings["trained_len"]
    notes = source_notes(
        prepared, out.sources, translator.src_tokenizer, trained_len, first_number=first_number
    )
    notes += output_notes(out.unfinished, first_number=first_number)  # cut by their budget
    if prefix and first_number == 1:  # once, not again for a stream's later lines
        notes += prefix_notes(
            translator.prepare(prefix, target=True),
            translator.tgt_tokenizer,
            max_decode_len=max_decode_len or translator.settings.get("max_decode_len"),
            position_limit=position_limit(translator.model_config),
        )
    note_limit.emit(notes, stderr)
    if attention_plot:
        _plot_first(translator, prepared, out, attention_plot)
    natural = translator.natural if text == "natural" else None
    if nbest is not None:
        return nbest_lines(sentences, out.hypotheses, natural, first_index=first_number - 1)
    return format_lines(sentences, out.texts, output_format, natural)


def check_output(
    translator: Translator, output: TextIO, text: str = "natural", sources: Sequence[str] = ()
) -> None:
    """An `OutputEncodingError` (a ValueError: one FATAL line) before any decoding when the
    encoding of `output` (an ASCII or Latin-1 stdout; a file of `open_output` is UTF-8)
    cannot hold a character the translations may contain: one of the target vocabulary
    (`stream_encoding.output_characters`), its capitals and learned forms for natural `text`,
    or of the `sources` a TSV line repeats. Otherwise the first translation written would
    fail, after every line was decoded, and take all the others with it."""
    truecaser = translator.text_truecaser if text == "natural" else None
    sources = [clean_text(s) for s in sources]
    check_translations_fit(output, output_characters(translator.tgt_tokenizer, truecaser, sources))


def nbest_lines(
    sources: Sequence[str],
    hypotheses: Sequence[Hypotheses],
    natural: Callable[[str, str], str] | None = None,
    first_index: int = 0,
) -> list[str]:
    """translate --nbest's TSV: per hypothesis `line_index<TAB>rank<TAB>score<TAB>translation`,
    line_index counting input lines from 0 (`first_index` for a stream's later lines), rank
    from 1 (the best), score log P / ((5 + len) / 6)^alpha as the search ranks (4 decimals).
    An empty input has one line with rank 1, score 0 and an empty translation."""
    out = []
    for n, (source, hyps) in enumerate(zip(sources, hypotheses, strict=True)):
        for rank, (text, score) in enumerate(zip(hyps.texts, hyps.scores, strict=True), 1):
            line = clean_text(text).strip()
            if natural is not None:
                line = natural(line, clean_text(source))
            out.append(f"{first_index + n}\t{rank}\t{score:.4f}\t{line}")
    return out


def _plot_first(translator: Translator, prepared: list[str], out: Any, path: str | Path) -> None:
    first = next((i for i, s in enumerate(prepared) if s), None)
    if first is None:
        raise ValueError("no non-empty sentence to draw attention for.")
    # A cut input's translation is its parts'; the map shows the whole input's own.
    target_ids = None if first in out.sources.parts else out.target_ids[first]
    maps = translator.attention_maps(prepared[first], target_ids=target_ids)
    # Imported here, for matplotlib (~0.3 s to import, a tenth of a one-line translate).
    from transformer_jax.evaluation.plots import plot_attention

    plot_attention(maps, path)
    logging.info("Attention of %r written to %s", prepared[first], path)


def stdin_is_stream(stdin: TextIO) -> bool:
    """True unless `stdin` is a regular file (`< in.txt`): a terminal, a pipe or a socket
    may deliver lines over time, so `translate_stream` translates them as they come."""
    try:
        return not stat.S_ISREG(os.fstat(stdin.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # io.StringIO and the like: no descriptor
        return False


def line_chunks(
    fd: int, *, one_line: bool = False, prompt: Callable[[], None] | None = None
) -> Iterator[bytes]:
    """The bytes read from descriptor `fd`, cut after line ends, as they arrive.

    Each chunk holds every complete line already waiting (a fast pipe or a pasted block: a
    batch), read without blocking once the first has come; `one_line`: exactly one line per
    chunk. At the end of the input an unterminated last line is the last chunk. `prompt` is
    called before each wait for a new line (a terminal's "> ").
    """
    pending, ended = b"", False
    while not ended or pending:
        if not ended and (b"\n" not in pending):
            if prompt is not None and not pending:
                prompt()
            data = os.read(fd, 1 << 16)  # blocks until something arrives
            ended = not data
            pending += data
            # What else is waiting now joins this chunk (select: no wait, timeout 0).
            while not ended and not one_line and select.select([fd], [], [], 0)[0]:
                data = os.read(fd, 1 << 16)
                ended = not data
                pending += data
                if len(pending) > 1 << 20:
                    break
        if one_line:
            cut = pending.find(b"\n") + 1
        else:
            cut = pending.rfind(b"\n") + 1
        if cut == 0 and ended:
            cut = len(pending)  # the last line, without "\n"
        if cut:
            chunk, pending = pending[:cut], pending[cut:]
            yield chunk


def translate_stream(
    workdir: str | Path,
    stdin: TextIO,
    stdout: TextIO,
    *,
    one_line: bool = False,
    attention_plot: str | Path | None = None,
    translator: Translator | None = None,
    stderr: TextIO | None = None,
    **options: Any,
) -> int:
    """Translate `stdin` line by line as its lines arrive; returns the number of lines.

    The run is loaded first; then each chunk of lines (`line_chunks`: every line already
    waiting, or with `one_line` exactly one) is translated by `translate_workdir` (`options`:
    its keywords), written to `stdout` and flushed before the next is read, so a program can
    write a line and read its translation back (a co-process). From a terminal, a prompt
    on `stderr`. The same lines and notes as `translate_workdir` on the whole input; the
    attention plot is of the first non-empty line. A `stdout` whose encoding cannot hold what
    the model may write is refused before the first line is read (`check_output`).
    """
    stderr = stderr or sys.stderr
    check_format(options.get("output_format", "plain"), options.get("text", "natural"))
    translator = translator or load_translator(
        workdir, options.get("step"), average_last=options.get("average_last", 1)
    )
    check_output(translator, stdout, options.get("text", "natural"))

    def translate(lines: list[str], first_number: int) -> list[str]:
        nonlocal attention_plot
        plot = None
        if attention_plot and any(translator.prepare(s) for s in lines):
            plot, attention_plot = attention_plot, None
        return translate_workdir(
            workdir,
            lines,
            translator=translator,
            attention_plot=plot,
            stderr=stderr,
            first_number=first_number,
            output=stdout,  # a TSV line's sources, checked with each chunk
            **options,
        )

    return stream_lines(stdin, stdout, translate, one_line=one_line, stderr=stderr)


def stream_lines(
    stdin: TextIO,
    stdout: TextIO,
    translate: Callable[[list[str], int], list[str]],
    *,
    one_line: bool = False,
    stderr: TextIO | None = None,
) -> int:
    """The loop of `translate_stream`, for either engine: each chunk of `stdin`'s lines
    (`line_chunks`) goes to `translate(lines, first_number)` (numbered from 1 over the whole
    stream), whose output lines are written to `stdout` and flushed before the next chunk is
    read; a terminal gets the prompts on `stderr`. Returns the number of lines."""
    stderr = stderr or sys.stderr

    def prompt() -> None:
        print(LINE_PROMPT, end="", file=stderr, flush=True)

    terminal = stdin.isatty()
    if terminal:
        print(TERMINAL_PROMPT, file=stderr, flush=True)
    done = 0
    for chunk in line_chunks(
        stdin.fileno(), one_line=one_line, prompt=prompt if terminal else None
    ):
        lines, invalid = decode_lines(chunk, start=done == 0)  # a byte-order mark begins it
        _warn_invalid("stdin", [done + n for n in invalid], stderr)
        write_lines(translate(lines, done + 1), None, stdout)
        done += len(lines)
    if terminal:
        print(file=stderr)  # Ctrl-D ended the last prompt's line
    return done
