"""Sentences -> source id rows for decoding, with what to tell the user about them.

Each row is data/'s `encode_text` (tokens + `<eos>`), the same function that makes training
sources, and is never cut inside a sentence. An input of several sentences longer than
`segment_len` tokens is translated in parts of whole sentences (`data.segmenting`; with
segment_len 1, sentence by sentence), and the parts' translations are joined. A single sentence
longer than any the model was trained on is translated whole (with a warning), and only a
learned position table has a hard limit (a clear error).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

from transformer_jax.data.encoding import encode_text
from transformer_jax.data.segmenting import segment
from transformer_jax.data.vocab import UNK_ID
from transformer_jax.decoding.shapes import SourceTooLongError


class DecodingWarning(UserWarning):
    """An input is longer than the model was trained on (still translated), or is empty."""


@dataclasses.dataclass
class EncodedSources:
    """Source ids (tokens + `<eos>`, whole; [] for an empty sentence) and what to report.

    long: {sentence index: its length with `<eos>`} for sources (or, for a cut one, its
      longest part) longer than the length the model was trained on (translated whole
      anyway); empty: indices of empty sentences, blank or holding only what the
      tokenizer drops (a zero-width space, a BOM): a bare `<eos>` would make up a sentence.
    parts: {sentence index: the id rows it is translated as} for inputs cut at sentence
      ends (`rows` gives every sentence's rows).
    """

    ids: list[list[int]]
    long: dict[int, int]
    empty: list[int]
    parts: dict[int, list[list[int]]] = dataclasses.field(default_factory=dict)

    def rows(self, i: int) -> list[list[int]]:
        """The id rows sentence `i` is decoded as: its parts, else [its ids] ([] if empty)."""
        if i in self.parts:
            return self.parts[i]
        return [self.ids[i]] if self.ids[i] else []


def encode_sources(
    tokenizer: Any,
    sentences: Sequence[str],
    *,
    trained_len: int | None = None,
    position_limit: int | None = None,
    segment_len: int | None = None,
    warn: bool = True,
) -> EncodedSources:
    """`encode_text` of each sentence, never cut inside a sentence; [] for an empty one (one
    that encodes to `<eos>` alone).

    trained_len: the longest source (with `<eos>`) seen in training; a longer one is
      translated whole and reported in `long` (and one summary `DecodingWarning`).
    position_limit: a learned position table's rows (`ModelConfig.position_limit`); a
      longer source (or part) cannot be encoded: `SourceTooLongError` names the sentences
      and the limit.
    segment_len: an input longer than this (tokens with `<eos>`) is cut at sentence ends into
      parts of at most this length (`data.segmenting.segment`), listed in `parts`; None or 0
      never cuts.
    """
    out = EncodedSources([], {}, [])
    too_long: list[tuple[int, int]] = []
    for i, sentence in enumerate(sentences):
        ids = encode_text(tokenizer, sentence) if sentence.strip() else []
        if len(ids) <= 1:  # blank, or only what the tokenizer drops (U+200B, a BOM): <eos>
            out.empty.append(i)
            out.ids.append([])
            continue
        out.ids.append(ids)
        if segment_len and len(ids) > segment_len:
            texts = segment(sentence, lambda t: len(encode_text(tokenizer, t)), segment_len)
            if len(texts) > 1:
                out.parts[i] = [encode_text(tokenizer, t) for t in texts]
        longest = max(len(row) for row in out.rows(i))
        if position_limit is not None and longest > position_limit:
            too_long.append((i, longest))
        elif trained_len is not None and longest > trained_len:
            out.long[i] = longest
    if too_long:
        which = ", ".join(f"#{i} ({n} tokens)" for i, n in too_long[:5])
        more = f" and {len(too_long) - 5} more" if len(too_long) > 5 else ""
        raise SourceTooLongError(
            f"Sentence {which}{more} is longer than this model's learned position table "
            f"(model.max_len={position_limit} tokens with <eos>): it cannot be encoded. Split "
            "the sentence at sentence ends, or train with a larger model.max_len or "
            "sinusoidal positions."
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
        where = " in its longest part" if first in out.parts else ""
        warnings.warn(
            f"Sentence #{first} has {n} tokens with <eos>{where}, more than the longest the "
            f"model was trained on ({trained_len}){more}; translating it whole, but quality "
            "may drop "
            f"({sentences[first][:40]!r}...).",
            DecodingWarning,
            3,
        )
    return out


def unknown_words(tokenizer: Any, text: str, ids: Sequence[int] | None = None) -> list[str]:
    """The words of `text` (split on whitespace, each once, in order) that `tokenizer` reads
    with `<unk>`: characters a SentencePiece model never saw (an emoji, another script), or
    words outside a word vocabulary. The model sees `<unk>` in their place.

    ids: `text`'s ids if already encoded (`EncodedSources.ids`); without `<unk>` among them
    no word is encoded again.
    """
    if UNK_ID not in (tokenizer.encode(text) if ids is None else ids):
        return []
    return [w for w in dict.fromkeys(text.split()) if UNK_ID in tokenizer.encode(w)]
