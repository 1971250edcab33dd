"""What `python -m experiments.translate` does, as testable functions.

lines = translate_workdir("runs/fra_eng", ["go .", "i lost ."], attention_plot="att.png")
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from absl import logging

from transformer_jax.data.vocab import EOS_ID, PAD_ID
from transformer_jax.decoding.attention_maps import attention_weights
from transformer_jax.decoding.translate import EMPTY_MESSAGE, decode_settings, translate_detailed
from transformer_jax.evaluation.report import book_style
from transformer_jax.evaluation.text_lines import clean_text, split_lines


def read_sentences(
    args: Sequence[str], input_file: str | None = None, stdin: TextIO | None = None
) -> list[str]:
    """Sentences from the command line, else from `input_file` ("-" = stdin), else stdin.

    Each argument is one sentence, even if it holds a newline (line breaks become spaces in
    `translate_workdir`). A file or stdin holds one sentence per line, split on `\\n` only
    (`\\r\\n` accepted; `text_lines.split_lines`): one output per input line, in order, blank
    lines included (they get a message).
    """
    if args:
        return list(args)
    if input_file and input_file != "-":
        with open(input_file, encoding="utf-8", newline="") as handle:  # no newline translation
            text = handle.read()
    elif stdin is not None:
        # The bytes: a text-mode sys.stdin turns a lone "\r" into a line break of its own.
        buffer = getattr(stdin, "buffer", None)
        text = buffer.read().decode("utf-8", errors="replace") if buffer else stdin.read()
    else:
        return []
    return split_lines(text)


def _token_names(tokenizer: Any, ids: Iterable[int]) -> list[str]:
    name = getattr(tokenizer, "id_to_token", None)
    return [name(int(i)) if name else tokenizer.decode([int(i)]) for i in ids]


def translate_workdir(
    workdir: str | Path,
    sentences: Sequence[str],
    *,
    step: int | None = None,
    average_last: int = 1,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_decode_len: int | None = None,
    attention_plot: str | Path | None = None,
    bundle: Any = None,
) -> list[str]:
    """Translate `sentences` with the run in `workdir`; returns one printable line each.

    Control characters of the inputs become spaces (`text_lines.clean_text`: ANSI escapes,
    line and paragraph separators, a lone `\\r`...), so an input is one sentence and one
    output line, and nothing raw reaches the terminal. Inputs get the run's preprocessing
    (the book's lowercasing and punctuation spacing for fra_eng). Each line is
    `source => translation`; an empty input gets a message instead, an input longer than
    the training limit a note (it is translated whole). Decoding settings not given come
    from the run config (`decode_settings`). With `attention_plot`, the attention heatmaps
    of the first non-empty sentence and its translation are written there as a PNG (noted
    in the log, not in the returned lines).
    """
    from transformer_jax.data.preprocessing import preprocess_nmt
    from transformer_jax.training.checkpoints import load_for_inference

    bundle = bundle or load_for_inference(workdir, step, average_last=average_last)
    config, cfg = bundle.config, bundle.model_config
    cleaned = [clean_text(s).strip() for s in sentences]  # no control character goes further
    prepared = [preprocess_nmt(s) if book_style(config) else s for s in cleaned]
    settings = decode_settings(
        config, beam_size=beam_size, alpha=alpha, max_decode_len=max_decode_len
    )
    out = translate_detailed(
        cfg,
        bundle.params,
        bundle.src_tokenizer,
        bundle.tgt_tokenizer,
        prepared,
        warn=False,  # reported on each line instead
        **settings,
    )
    lines = []
    for i, (source, output) in enumerate(zip(prepared, out.texts, strict=True)):
        if i in out.sources.empty:
            lines.append(f"[{i}] {EMPTY_MESSAGE}")
            continue
        suffix = ""
        if i in out.sources.long:
            suffix = (
                f"   (input of {out.sources.long[i]} tokens, longer than the training limit "
                f"{settings['trained_len']}: translated whole)"
            )
        lines.append(f"{source} => {clean_text(output)}{suffix}")

    if attention_plot:
        from transformer_jax.evaluation.plots import plot_attention

        first = next((i for i, s in enumerate(prepared) if s), None)
        if first is None:
            raise ValueError("no non-empty sentence to draw attention for.")
        src = out.sources.ids[first]
        row = [int(t) for t in out.tokens[first]]
        tgt = row[: row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID]
        maps = attention_weights(
            cfg,
            bundle.params,
            src,
            tgt,
            src_tokens=_token_names(bundle.src_tokenizer, src),
            tgt_tokens=["<bos>", *_token_names(bundle.tgt_tokenizer, tgt)],
        )
        plot_attention(maps, attention_plot)
        # On stderr (the absl log): stdout holds exactly one line per input sentence.
        logging.info("Attention of %r written to %s", prepared[first], attention_plot)
    return lines
