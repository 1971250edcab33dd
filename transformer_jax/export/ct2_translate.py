"""Translate text with an exported CTranslate2 model directory: no JAX compilation.

    translate_lines("model_ct2", ["go .", "i lost ."], beam_size=4)  # -> ["va !", ...]

One output per input, in order; an empty input gives "". Inputs get the run's
preprocessing (recorded in `export.json`: the book's lowercasing and punctuation spacing
for fra_eng), and an input of several sentences is translated in parts cut at sentence ends
(`data.segmenting`, the run's `segment_len`), as the JAX engine does. Sources are the tokenizer's
ids + `<eos>` (the model's `add_source_eos`), outputs are decoded by the same tokenizer.
The output budget is fairseq's `max_len_a · S + max_len_b` tokens with S the source length
(`<eos>` included), per sentence (or part): those with equal budgets are translated in one
call.

Search: beam size 1 is greedy search; with `length_penalty=0` (the default) beam search
returns the most probable hypothesis, exactly as our `beam_search` with α = 0 (tested in
tests/test_export_ctranslate2.py). CTranslate2's length penalty divides by len^α, not
GNMT's ((5 + len) / 6)^α, so α > 0 ranks hypotheses differently from the JAX engine.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformer_jax.data.preprocessing import preprocess_nmt
from transformer_jax.data.segmenting import join_translations
from transformer_jax.data.text_form import clean_text
from transformer_jax.data.tokenizers import load_tokenizer
from transformer_jax.data.truecasing import Truecaser
from transformer_jax.data.vocab import EOS_ID
from transformer_jax.decoding.defaults import DEFAULTS
from transformer_jax.export.ctranslate2 import MANIFEST
from transformer_jax.export.extras import import_extra
from transformer_jax.inference.settings import check_segment_len
from transformer_jax.inference.source_ids import encode_sources


def read_manifest(model_dir: str | Path) -> dict[str, Any]:
    """`export.json` of an exported directory, with a clear error when it is missing; an
    older export's `decoding.split_len` is read as today's `segment_len`."""
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{model_dir} has no {MANIFEST}: it is not a directory written by "
            "`python -m experiments.export --format=ctranslate2`."
        )
    manifest = json.loads(path.read_text())
    kind = manifest.get("format")
    if kind != "ctranslate2":  # e.g. a StableHLO export: no CTranslate2 model to load
        raise ValueError(
            f"{model_dir} holds a {kind!r} export, not a CTranslate2 one: export the run with "
            "`python -m experiments.export --format=ctranslate2`, or translate with "
            "--engine=jax --workdir=RUN."
        )
    decoding = manifest.get("decoding")
    if isinstance(decoding, dict) and "split_len" in decoding:  # exported before the rename
        decoding.setdefault("segment_len", decoding.pop("split_len"))
    return manifest


def load_truecaser(model_dir: str | Path) -> Truecaser | None:
    """The export's `Truecaser` (translate's natural text), None for data kept as written.
    An export from before tables were kept gets the punctuation and sentence-capital rules
    of no particular language."""
    manifest = read_manifest(model_dir)
    if not manifest.get("book_style", False):
        return None
    path = Path(model_dir) / manifest.get("truecaser", "")
    return Truecaser.load(path) if manifest.get("truecaser") and path.is_file() else Truecaser("")


def _prepare(sentences: Sequence[str], book_style: bool) -> list[str]:
    """The JAX engine's input handling: control characters to spaces, strip, preprocess."""
    cleaned = [clean_text(s).strip() for s in sentences]
    return [preprocess_nmt(s) if book_style and s else s for s in cleaned]


def translate_lines(
    model_dir: str | Path,
    sentences: Sequence[str],
    *,
    beam_size: int | None = None,
    length_penalty: float = 0.0,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    segment_len: int | None = None,
    batch_size: int = DEFAULTS["batch_size"],
    compute_type: str = "default",
    intra_threads: int = 0,
    translator: Any = None,
) -> list[str]:
    """Translations of `sentences` (one each, "" for an empty one) by a CTranslate2 export.

    beam_size: 1 = greedy search; default the run's (`export.json`; for older exports
      `decoding.defaults.DEFAULTS`, as for every setting an export did not record).
    max_len_a, max_len_b: the output budget a·S + b (default: the run's, from `export.json`).
    segment_len: inputs longer than this (tokens with `<eos>`) are translated in parts of whole
      sentences of at most this length; default the run's (`export.json`; sentence by
      sentence for older exports), 0 = whole.
    compute_type: CTranslate2's ("default" runs the weights as saved, "int8" quantises).
    translator: an open `ctranslate2.Translator` of `model_dir`, to reuse across calls.
    """
    # The [export] extra's library, imported only here: the JAX engine never needs it.
    ctranslate2 = import_extra("ctranslate2", "--engine=ctranslate2")

    model_dir = Path(model_dir)
    manifest = read_manifest(model_dir)
    decoding = manifest.get("decoding", {})
    recorded = {**DEFAULTS, **decoding}  # the run's settings; the defaults for older exports
    beam_size = int(recorded["beam_size"]) if beam_size is None else beam_size
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}.")
    a = recorded["max_len_a"] if max_len_a is None else max_len_a
    b = recorded["max_len_b"] if max_len_b is None else max_len_b
    if segment_len is None:
        segment_len = recorded["segment_len"]
    check_segment_len(segment_len)
    limit = int(manifest["max_positions"])
    src_tok = load_tokenizer(model_dir / manifest["source_tokenizer"])
    tgt_tok = load_tokenizer(model_dir / manifest["target_tokenizer"])
    translator = translator or ctranslate2.Translator(
        str(model_dir), device="cpu", compute_type=compute_type, intra_threads=intra_threads
    )

    prepared = _prepare(sentences, bool(manifest.get("book_style", False)))
    # The JAX engine's rows: one per input, or per part of one cut at sentence ends.
    encoded = encode_sources(src_tok, prepared, segment_len=segment_len, warn=False)
    owner, rows_ids = [], []  # owner[r]: the input row r belongs to
    for i in range(len(prepared)):
        for row in encoded.rows(i):
            owner.append(i)
            rows_ids.append(row)
    by_budget: dict[int, list[int]] = defaultdict(list)
    sources: dict[int, list[str]] = {}
    for r, ids in enumerate(rows_ids):  # ids end in <eos>
        if len(ids) > limit:
            raise ValueError(
                f"Sentence #{owner[r]} has {len(ids)} tokens with <eos>, more than the exported "
                f"position table ({limit} rows): export again with a larger --max_positions."
            )
        sources[r] = [src_tok.id_to_token(t) for t in ids[:-1]]  # the model adds <eos>
        budget = min(limit, max(1, int(a * len(ids) + b)))
        by_budget[budget].append(r)

    translated = [""] * len(owner)
    for budget, rows in sorted(by_budget.items()):
        results = translator.translate_batch(
            [sources[r] for r in rows],
            max_batch_size=batch_size,
            beam_size=beam_size,
            length_penalty=length_penalty,
            max_decoding_length=budget,
            min_decoding_length=0,  # like our search, <eos> may come first
            max_input_length=0,  # never cut a source
        )
        for r, result in zip(rows, results, strict=True):
            ids = [tgt_tok.token_to_id(t) for t in result.hypotheses[0]]
            translated[r] = tgt_tok.decode([*ids, EOS_ID])
    parts_out: list[list[str]] = [[] for _ in prepared]
    for r, text in enumerate(translated):
        parts_out[owner[r]].append(text)
    return [join_translations(parts) for parts in parts_out]
