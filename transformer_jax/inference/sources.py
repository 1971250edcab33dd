"""Sentences -> source id rows for decoding, with what to tell the user about them.

Each row is data/'s `encode_text` (tokens + `<eos>`), the same function that makes training
sources, and is never cut: a sentence longer than any the model was trained on is translated
whole (with a warning), and only a learned position table has a hard limit (a clear error).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

from transformer_jax.data.encoding import encode_text
from transformer_jax.decoding.batch_decode import SourceTooLongError


class DecodingWarning(UserWarning):
    """An input is longer than the model was trained on (still translated), or is empty."""


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
    tokenizer: Any,
    sentences: Sequence[str],
    *,
    trained_len: int | None = None,
    position_limit: int | None = None,
    warn: bool = True,
) -> EncodedSources:
    """`encode_text` of each sentence, never cut; [] for an empty (or blank) sentence.

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
        ids = encode_text(tokenizer, sentence)
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
            3,
        )
    if warn and out.long:
        (first, n), count = next(iter(out.long.items())), len(out.long)
        more = f" and {count - 1} more" if count > 1 else ""
        warnings.warn(
            f"Sentence #{first} has {n} tokens with <eos>, more than the longest the model was "
            f"trained on ({trained_len}){more}; translating it whole, but quality may drop "
            f"({sentences[first][:40]!r}...).",
            DecodingWarning,
            3,
        )
    return out
