"""Text in, text out: tokenise, batch, decode over the local devices, detokenise.

    translate(model_config, params, src_tokenizer, tgt_tokenizer, ["go .", "i lost ."])

This is the one inference path: the train loop's BLEU, `evaluation.report` and the translate
command all call `translate` / `translate_detailed`.

Sources are `tokenizer.encode(text) + [<eos>]`, as in training (d2l §9.5 `build_array_nmt`),
and are never cut: a sentence longer than any the model was trained on is translated whole
(with a warning), and only a model with a learned position table has a hard limit (a clear
error). The output budget follows the source, as fairseq's `--max-len-a/b`: at most
`max_len_a · S + max_len_b` tokens, S the longest source of the batch. Sentences are sorted
by length so a batch holds similar lengths, padded to a few fixed shapes (one compilation
each), and returned in the input order.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from transformer_jax.data.vocab import EOS_ID, PAD_ID
from transformer_jax.decoding import model_decode
from transformer_jax.nn import ModelConfig

# Source widths and output budgets are rounded up to a multiple of this: few compilations.
LENGTH_BUCKET = 8
EMPTY_MESSAGE = "<empty input: nothing to translate>"
# fairseq-style output budget a·S + b; training configs set their own (`eval.max_len_a/b`).
DEFAULT_MAX_LEN_A = 2.0
DEFAULT_MAX_LEN_B = 10


class Tokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class DecodingWarning(UserWarning):
    """An input is longer than the model was trained on (still translated), or is empty."""


class SourceTooLongError(ValueError):
    """A source needs more positions than a learned position table has."""


@dataclasses.dataclass
class EncodedSources:
    """Source ids (tokens + `<eos>`, whole; [] for an empty sentence) and what to report.

    long: {sentence index: its length with `<eos>`} for sources longer than the length the
      model was trained on (translated whole anyway); empty: indices of empty sentences.
    """

    ids: list[list[int]]
    long: dict[int, int]
    empty: list[int]


def encode_sources(
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    *,
    trained_len: int | None = None,
    position_limit: int | None = None,
    warn: bool = True,
) -> EncodedSources:
    """Token ids + `<eos>` per sentence, never cut; [] for an empty sentence.

    trained_len: the longest source (with `<eos>`) seen in training; a longer one is
      translated whole and reported in `long` (and one summary `DecodingWarning`).
    position_limit: a learned position table's rows (`ModelConfig.position_limit`); a
      longer source cannot be encoded: `SourceTooLongError` names the sentences and the limit.
    """
    out = EncodedSources([], {}, [])
    too_long: list[tuple[int, int]] = []
    for i, sentence in enumerate(sentences):
        if not sentence.strip():
            out.empty.append(i)
            out.ids.append([])
            continue
        ids = list(tokenizer.encode(sentence)) + [EOS_ID]
        if position_limit is not None and len(ids) > position_limit:
            too_long.append((i, len(ids)))
        elif trained_len is not None and len(ids) > trained_len:
            out.long[i] = len(ids)
        out.ids.append(ids)
    if too_long:
        which = ", ".join(f"#{i} ({n} tokens)" for i, n in too_long[:5])
        more = f" and {len(too_long) - 5} more" if len(too_long) > 5 else ""
        raise SourceTooLongError(
            f"Sentence {which}{more} is longer than this model's learned position table "
            f"(model.max_len={position_limit} tokens with <eos>): it cannot be encoded. Split "
            "the sentence, or train with a larger model.max_len or sinusoidal positions."
        )
    if warn and out.empty:
        which = ", ".join(f"#{i}" for i in out.empty[:10])
        noun = "Sentence" if len(out.empty) == 1 else f"{len(out.empty)} sentences:"
        warnings.warn(
            f"{noun} {which} {'is' if len(out.empty) == 1 else 'are'} empty; nothing to "
            "translate (the translation is empty).",
            DecodingWarning,
            2,
        )
    if warn and out.long:
        (first, n), count = next(iter(out.long.items())), len(out.long)
        more = f" and {count - 1} more" if count > 1 else ""
        warnings.warn(
            f"Sentence #{first} has {n} tokens with <eos>, more than the longest the model was "
            f"trained on ({trained_len}){more}; translating it whole, but quality may drop "
            f"({sentences[first][:40]!r}...).",
            DecodingWarning,
            2,
        )
    return out


def source_ids(tokenizer: Tokenizer, sentence: str) -> list[int]:
    """`encode_sources` of one sentence: ids + `<eos>`, whole; [] if empty."""
    return encode_sources(tokenizer, [sentence], warn=False).ids[0]


def output_budget(
    src_width: int,
    *,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    max_decode_len: int | None = None,
    position_limit: int | None = None,
) -> int:
    """Most tokens to generate for sources of `src_width` tokens (with `<eos>`).

    `max_decode_len` if given, else ceil(a·S + b) rounded up to a multiple of LENGTH_BUCKET
    (one compilation per rounded budget); within a learned position table's limit.
    """
    if max_decode_len:
        length = int(max_decode_len)
    else:
        length = _round_up(max(1, math.ceil(max_len_a * src_width + max_len_b)), LENGTH_BUCKET)
    return min(length, position_limit) if position_limit is not None else length


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pad_batch(rows: list[list[int]], num_rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pad to (num_rows, width); filler rows are a lone <eos> so no row is fully masked."""
    src = np.zeros((num_rows, width), np.int32)
    src_len = np.ones((num_rows,), np.int32)
    src[:, 0] = EOS_ID
    for r, ids in enumerate(rows):
        src[r, : len(ids)] = ids
        src_len[r] = len(ids)
    return src, src_len


def _batch_rows(n: int, batch_size: int, num_devices: int) -> int:
    """Rows of a batch of n sentences: batch_size, or a power of two for a short last batch."""
    rows = batch_size if n >= batch_size else 1 << max(0, n - 1).bit_length()
    return _round_up(max(rows, num_devices), num_devices)


def decode_ids(
    model_config: ModelConfig,
    params: Any,
    sources: Sequence[Sequence[int]],
    *,
    beam_size: int = 1,
    max_decode_len: int | None = None,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    batch_size: int = 64,
    alpha: float = 0.6,
) -> list[np.ndarray]:
    """Decode non-empty id lists (each already ending in <eos>) -> generated ids per source.

    Each batch may generate `output_budget(S)` tokens, S its longest source (see the module
    docstring). Returns one (L,) array per source (the best hypothesis: `<eos>` then `<pad>`).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    cfg = model_config.replace(deterministic=True, decode=False)
    limit = cfg.position_limit
    longest = max(map(len, sources), default=0)
    if limit is not None and longest > limit:
        raise SourceTooLongError(
            f"a source of {longest} tokens is longer than the learned position table "
            f"(model.max_len={limit})."
        )
    mesh = model_decode.local_mesh()
    num_devices = mesh.devices.size
    # Once, replicated on every device: not a host-to-device copy per batch.
    params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[np.ndarray] = [np.zeros((0,), np.int32)] * len(sources)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        rows = [list(sources[i]) for i in chunk]
        longest = max(map(len, rows))
        width = _round_up(longest, LENGTH_BUCKET)
        if limit is not None:
            width = min(width, limit)
        length = output_budget(
            longest,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
            max_decode_len=max_decode_len,
            position_limit=limit,
        )
        src, src_len = _pad_batch(rows, _batch_rows(len(rows), batch_size, num_devices), width)
        decode = model_decode.sharded_decoder(
            cfg, beam_size=beam_size, max_decode_len=length, alpha=float(alpha), mesh=mesh
        )
        tokens = np.asarray(decode(params, src, src_len))  # (B, L) or (B, W, L)
        if tokens.ndim == 3:
            tokens = tokens[:, 0]  # the best of the n-best
        for r, i in enumerate(chunk):
            out[i] = tokens[r]
    return out


@dataclasses.dataclass
class Translations:
    """What `translate_detailed` returns: texts in input order, and how they were made.

    tokens: generated ids per sentence ((0,) for an empty one), `<eos>` then `<pad>`.
    generated_tokens: tokens produced over all sentences, each `<eos>` included.
    """

    texts: list[str]
    tokens: list[np.ndarray]
    sources: EncodedSources
    generated_tokens: int


def translate_detailed(
    model_config: ModelConfig,
    params: Any,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    sentences: Sequence[str],
    *,
    beam_size: int = 1,
    alpha: float = 0.6,
    max_decode_len: int | None = None,
    max_len_a: float = DEFAULT_MAX_LEN_A,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    batch_size: int = 64,
    trained_len: int | None = None,
    warn: bool = True,
) -> Translations:
    """`translate`, also returning the ids, the encoded sources and the token count."""
    encoded = encode_sources(
        src_tokenizer,
        sentences,
        trained_len=trained_len,
        position_limit=model_config.position_limit,
        warn=warn,
    )
    todo = [i for i, x in enumerate(encoded.ids) if x]
    decoded = decode_ids(
        model_config,
        params,
        [encoded.ids[i] for i in todo],
        beam_size=beam_size,
        max_decode_len=max_decode_len,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        batch_size=batch_size,
        alpha=alpha,
    )
    texts = [""] * len(sentences)
    tokens: list[np.ndarray] = [np.zeros((0,), np.int32)] * len(sentences)
    generated = 0
    for i, row in zip(todo, decoded, strict=True):
        texts[i] = tgt_tokenizer.decode([int(t) for t in row])
        tokens[i] = row
        ends = np.flatnonzero(row == EOS_ID)
        generated += int(ends[0]) + 1 if ends.size else int((row != PAD_ID).sum())
    return Translations(texts, tokens, encoded, generated)


def translate(
    model_config: ModelConfig,
    params: Any,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    sentences: Sequence[str],
    **options: Any,
) -> list[str]:
    """Translate sentences (already preprocessed as the tokenizer expects) -> texts.

    `options` are `translate_detailed`'s keywords: beam_size (1 = greedy; larger beams rank
    by log P / ((5 + len) / 6)^alpha), alpha, max_decode_len, max_len_a, max_len_b,
    batch_size, trained_len. Sources are never cut. One longer than `trained_len` (tokens
    with `<eos>`; the training data's limit) is translated whole with a `DecodingWarning`;
    with learned positions, one beyond the table is a `SourceTooLongError`. An empty
    sentence gets a warning and the empty translation "". Each batch generates at most
    `max_decode_len` tokens if given, else `max_len_a · S + max_len_b`, S its longest source.
    """
    return translate_detailed(
        model_config, params, src_tokenizer, tgt_tokenizer, sentences, **options
    ).texts


def decode_settings(config: Any, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments of `translate` from a run config's `eval` and `data` sections.

    `overrides` with a value other than None win (e.g. a command-line `--beam_size`).
    Configs saved before a key existed get its default.
    """
    ev, data = config.eval, config.data
    settings = {
        "beam_size": ev.get("beam_size", 1),
        "alpha": ev.get("alpha", 0.6),
        "max_decode_len": ev.get("max_decode_len", 0) or None,
        "max_len_a": ev.get("max_len_a", DEFAULT_MAX_LEN_A),
        "max_len_b": ev.get("max_len_b", DEFAULT_MAX_LEN_B),
        "batch_size": ev.get("decode_batch_size", 64),
        "trained_len": data.get("max_src_len"),
    }
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return settings
