"""What translate tells the user about its inputs (on stderr), the same for both engines.

    for note in source_notes(prepared, encoded, tokenizer, trained_len):
        print(note, file=sys.stderr)

The JAX engine (`evaluation.translate_cli`) and the CTranslate2 engine
(`export.ct2_translate`) encode inputs with `source_ids.encode_sources` and word their notes
here, so an input gets the same notes whichever engine translates it. Sentences are numbered
from `first_number` (1 = the first input line).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID
from transformer_jax.decoding.shapes import LONG_SOURCE_FACTOR
from transformer_jax.inference.source_ids import EncodedSources, unknown_words


def long_note(number: int, tokens: int, in_part: bool, trained_len: int | None) -> str:
    """Input `number` is longer than any training source and is translated whole."""
    part = " in its longest sentence" if in_part else ""
    return (
        f"note: sentence {number} has {tokens} tokens{part}, more than the longest the model "
        f"was trained on ({trained_len}): translated whole."
    )


def cut_note(number: int, tokens: int, *, numbered_from: int = 1) -> str:
    """Input `number`'s translation was stopped by its output budget (`tokens` generated,
    no `<eos>`: `decoding.shapes.output_budget`), so it may end mid-word.
    `numbered_from` 0 says '#i' as `source_ids`' warnings do (an index), 1 a line number."""
    which = f"sentence #{number}" if numbered_from == 0 else f"sentence {number}"
    return (
        f"note: {which}'s translation was cut at {tokens} tokens, the most its length "
        "allows (max_len_a, max_len_b or max_decode_len; at most the budget of a source "
        f"{LONG_SOURCE_FACTOR}x the longest trained on): it may end mid-word."
    )


def output_notes(unfinished: dict[int, int], *, first_number: int = 1) -> list[str]:
    """The notes on translations cut by their budget (`Translations.unfinished`), numbered
    from `first_number` as `source_notes`'."""
    return [cut_note(first_number + i, n) for i, n in sorted(unfinished.items())]


def unknown_note(number: int, unknown: Sequence[str]) -> str:
    """Input `number` holds words the source vocabulary reads as `<unk>`."""
    return (
        f"note: sentence {number} has {_listed(unknown)}, which the model's vocabulary does not "
        "cover: read as <unk>, so the translation may miss or invent them."
    )


def source_notes(
    prepared: Sequence[str],
    encoded: EncodedSources,
    tokenizer: Any,
    trained_len: int | None,
    *,
    first_number: int = 1,
) -> list[str]:
    """The notes on `prepared` (the inputs as the model reads them) and their `encoded` ids:
    inputs longer than `trained_len` (`encoded.long`), then inputs with `<unk>` words."""
    notes = [
        long_note(first_number + i, tokens, i in encoded.parts, trained_len)
        for i, tokens in encoded.long.items()
    ]
    for i, (sentence, ids) in enumerate(zip(prepared, encoded.ids, strict=True)):
        unknown = unknown_words(tokenizer, sentence, ids)
        if unknown:
            notes.append(unknown_note(first_number + i, unknown))
    return notes


def prefix_notes(
    prefix: str,
    tokenizer: Any,
    *,
    max_decode_len: int | None,
    position_limit: int | None,
    table: str = "the model's position table",
) -> list[str]:
    """The notes on a forced `prefix` (as prepared, e.g. `Translator.prepare`), as sources
    get theirs (`inference.notes`): words the target vocabulary reads as `<unk>` (they come
    out as "⁇"), special tokens it holds (`<eos>`, `<pad>`, `<bos>` of a word vocabulary,
    forced as they are), and a prefix of more tokens than a translation may hold
    (`max_decode_len`, else `position_limit`, the size of `table`; None: no limit), which
    both engines cut there, mid-word if need be."""
    if not prefix:
        return []
    ids = list(tokenizer.encode(prefix))
    notes = []
    unknown = unknown_words(tokenizer, prefix, ids)
    if unknown:
        notes.append(
            f"note: the prefix has {_listed(unknown)}, which the model's target vocabulary does "
            "not cover: forced as <unk>, which the translations show in their place."
        )
    names = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}
    special = list(dict.fromkeys(names[i] for i in ids if i in names))
    if special:
        notes.append(
            f"note: the prefix holds the special token{'s' if len(special) > 1 else ''} "
            f"{', '.join(special)}, forced as a token of the translation: drop "
            f"{'them' if len(special) > 1 else 'it'} from --prefix."
        )
    limits = [(n, f"--max_decode_len={n}") for n in [max_decode_len] if n]
    limits += [(n, f"{table}, {n} rows") for n in [position_limit] if n]
    if limits:
        limit, name = min(limits)
        if len(ids) > limit:
            notes.append(
                f"note: the prefix has {len(ids)} tokens, more than a translation may hold "
                f"({name}): each translation is the prefix cut to its first {limit} tokens "
                "(shorten --prefix)."
            )
    return notes


def _listed(words: Sequence[str], most: int = 5) -> str:
    """ "'a', 'b' and 3 more": the first `most` of `words`, quoted, then how many more."""
    more = f" and {len(words) - most} more" if len(words) > most else ""
    return ", ".join(repr(w) for w in words[:most]) + more
