"""What `python -m experiments.translate` does, as testable functions.

lines = translate_workdir("runs/fra_eng", ["go .", "i lost ."], attention_plot="att.png")
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from transformer_jax.data.vocab import EOS_ID, PAD_ID
from transformer_jax.decoding.translate import (
    EMPTY_MESSAGE,
    DecodingWarning,
    attention_weights,
    decode_ids,
    encode_sources,
    translate,
)
from transformer_jax.evaluation.report import book_style


def read_sentences(
    args: Sequence[str], input_file: str | None = None, stdin: TextIO | None = None
) -> list[str]:
    """Sentences from the command line, else from `input_file` ("-" = stdin), else stdin.

    One sentence per line; trailing newlines are dropped, blank lines kept (they get a message).
    """
    if args:
        return list(args)
    if input_file and input_file != "-":
        text = Path(input_file).read_text(encoding="utf-8")
    elif stdin is not None:
        text = stdin.read()
    else:
        return []
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()  # the usual trailing newline of a file is not an empty sentence
    return lines


def _token_names(tokenizer: Any, ids: Iterable[int]) -> list[str]:
    name = getattr(tokenizer, "id_to_token", None)
    return [name(int(i)) if name else tokenizer.decode([int(i)]) for i in ids]


def translate_workdir(
    workdir: str | Path,
    sentences: Sequence[str],
    *,
    step: int | None = None,
    beam_size: int = 1,
    alpha: float = 0.6,
    max_decode_len: int | None = None,
    attention_plot: str | Path | None = None,
    bundle: Any = None,
) -> list[str]:
    """Translate `sentences` with the run in `workdir`; returns printable lines.

    Inputs get the run's preprocessing (the book's lowercasing and punctuation spacing for
    fra_eng). Each line is `source => translation`; an empty input gets a message instead,
    over-long inputs a truncation note. With `attention_plot`, the attention heatmaps of the
    first non-empty sentence and its translation are written there as a PNG.
    """
    from transformer_jax.data.preprocessing import preprocess_nmt
    from transformer_jax.training.checkpoints import load_for_inference

    bundle = bundle or load_for_inference(workdir, step)
    config, cfg = bundle.config, bundle.model_config
    prepared = [preprocess_nmt(s.strip()) if book_style(config) else s.strip() for s in sentences]
    max_src_len = min(config.data.max_src_len or cfg.max_len, cfg.max_len)
    length = max_decode_len or config.eval.max_decode_len or config.data.max_tgt_len
    encoded = encode_sources(bundle.src_tokenizer, prepared, max_src_len, warn=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodingWarning)  # reported on each line instead
        outputs = translate(
            cfg,
            bundle.params,
            bundle.src_tokenizer,
            bundle.tgt_tokenizer,
            prepared,
            beam_size=beam_size,
            alpha=alpha,
            max_decode_len=length,
            batch_size=config.eval.decode_batch_size,
            max_src_len=max_src_len,
        )
    lines = []
    for i, (source, output) in enumerate(zip(prepared, outputs, strict=True)):
        if i in encoded.empty:
            lines.append(f"[{i}] {EMPTY_MESSAGE}")
            continue
        suffix = ""
        if i in encoded.truncated:
            suffix = f"   (input of {encoded.truncated[i]} tokens truncated to {max_src_len})"
        lines.append(f"{source} => {output}{suffix}")

    if attention_plot:
        from transformer_jax.evaluation.plots import plot_attention

        first = next((i for i, s in enumerate(prepared) if s), None)
        if first is None:
            raise ValueError("no non-empty sentence to draw attention for.")
        src = encoded.ids[first]
        (row,) = decode_ids(
            cfg, bundle.params, [src], beam_size=beam_size, alpha=alpha, max_decode_len=length
        )
        row = [int(t) for t in row]
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
        lines.append(f"Attention of {prepared[first]!r} written to {attention_plot}")
    return lines
