"""What `python -m experiments.translate` does, as testable functions.

lines = translate_workdir("runs/fra_eng", ["go .", "i lost ."], attention_plot="att.png")
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from transformer_jax.data.vocab import EOS_ID, PAD_ID
from transformer_jax.decoding.attention_maps import attention_weights
from transformer_jax.decoding.translate import EMPTY_MESSAGE, decode_settings, translate_detailed
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
    average_last: int = 1,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_decode_len: int | None = None,
    attention_plot: str | Path | None = None,
    bundle: Any = None,
) -> list[str]:
    """Translate `sentences` with the run in `workdir`; returns printable lines.

    Inputs get the run's preprocessing (the book's lowercasing and punctuation spacing for
    fra_eng). Each line is `source => translation`; an empty input gets a message instead,
    an input longer than the training limit a note (it is translated whole). Decoding
    settings not given come from the run config (`decode_settings`). With `attention_plot`,
    the attention heatmaps of the first non-empty sentence and its translation are written
    there as a PNG.
    """
    from transformer_jax.data.preprocessing import preprocess_nmt
    from transformer_jax.training.checkpoints import load_for_inference

    bundle = bundle or load_for_inference(workdir, step, average_last=average_last)
    config, cfg = bundle.config, bundle.model_config
    prepared = [preprocess_nmt(s.strip()) if book_style(config) else s.strip() for s in sentences]
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
        lines.append(f"{source} => {output}{suffix}")

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
        lines.append(f"Attention of {prepared[first]!r} written to {attention_plot}")
    return lines
