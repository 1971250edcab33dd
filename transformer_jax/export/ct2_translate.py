"""Translate text with an exported CTranslate2 model directory: no JAX compilation.

    translate_lines("model_ct2", ["go .", "i lost ."], beam_size=4)  # -> ["va !", ...]

One output per input, in order; an empty input gives "". The engine does what the JAX
engine does, from the settings the run recorded in `export.json`: inputs get the run's
preprocessing (the book's lowercasing and punctuation spacing for fra_eng); an input of
several sentences is translated in parts cut at sentence ends (`data.segmenting`, the run's
`segment_len`); inputs are sorted by length into batches with the same output budgets
(`decoding.batch_decode`); beam search ranks by our length penalty with the run's α
(`best_hypotheses`); and the notes on long inputs and `<unk>` words are the same
(`Translations.notes`, `inference.notes`). Sources are the tokenizer's ids + `<eos>` (the
model's `add_source_eos`), outputs are decoded by the same tokenizer. One difference: a
source longer than the exported position table (`--max_positions`, 1,024 by default) is
translated in parts that fit it, with a note, where the JAX engine runs a sinusoidal model's
over-long sentence whole.

Decoding options (`decoding.options.DecodeOptions`) map onto CTranslate2's where it has
them (`nbest_hypotheses`): n-best (`num_hypotheses`, `return_scores`, ranked by our length
penalty), sampling (`sampling_temperature`, `sampling_topk`: a top_k over the vocabulary is
every token, as ours; `sampling_topp`, seeded by
`ctranslate2.set_random_seed` and a translator opened after it; N samples by repeating the
source N times) and a forced
prefix (`target_prefix`; without a fixed max_decode_len the budget holds it and max_len_b
more tokens, as ours). Not the same draws as the JAX engine's sampler (another random
generator), and a sample's log P is CTranslate2's, under its sampling distribution. It does
not ensemble: `ENSEMBLE_ERROR`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from transformer_jax.data.preprocessing import preprocess_nmt
from transformer_jax.data.segmenting import join_translations
from transformer_jax.data.text_form import clean_text
from transformer_jax.data.tokenizers import load_tokenizer
from transformer_jax.data.truecasing import Truecaser
from transformer_jax.data.vocab import EOS, EOS_ID
from transformer_jax.decoding.batch_decode import (
    LENGTH_BUCKET,
    output_budget,
    round_up,
    sorted_batches,
)
from transformer_jax.decoding.defaults import DEFAULTS
from transformer_jax.decoding.options import DecodeOptions, Hypotheses
from transformer_jax.decoding.search import length_penalty
from transformer_jax.export.ctranslate2 import MANIFEST
from transformer_jax.export.extras import import_extra
from transformer_jax.inference.notes import source_notes
from transformer_jax.inference.settings import check_segment_len
from transformer_jax.inference.source_ids import EncodedSources, encode_sources
from transformer_jax.runtime import commands

# CTranslate2's beam search differs from ours in bookkeeping: it refills a finished
# hypothesis's beam slot from 2W candidates (ours lets the slot go), and stops once
# W·patience hypotheses have finished (without a length penalty, once the best has); ours
# stops once no live hypothesis can still enter its W best. Its length penalty divides log P
# by len^α, ours by GNMT's ((5 + len) / 6)^α: no α maps one onto the other (with α = 0.6,
# 1,718 of 2,000 corpus sentences came out equal). So the engine asks CTranslate2 for the 2W
# hypotheses that finish first, with their log P (a penalty of RAW_PENALTY: len^1e-30 = 1,
# and no early stop), and ranks them by ours. Not equal by construction (the beams can hold
# different hypotheses), but equal to the JAX engine on every sentence measured
# (tests/test_export_ctranslate2.py; patience 1: 1,997 of 2,000).
PATIENCE = 2
RAW_PENALTY = 1e-30
# What the launchers print for an ensemble asked of this engine.
ENSEMBLE_ERROR = "the CTranslate2 engine does not ensemble; use --engine=jax"


def read_manifest(model_dir: str | Path) -> dict[str, Any]:
    """`export.json` of an exported directory, with a clear error when it is missing; an
    older export's `decoding.split_len` is read as today's `segment_len`."""
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{model_dir} has no {MANIFEST}: it is not a directory written by "
            f"`{commands.command('export', format='ctranslate2')}`."
        )
    manifest = json.loads(path.read_text())
    kind = manifest.get("format")
    if kind != "ctranslate2":  # e.g. a StableHLO export: no CTranslate2 model to load
        raise ValueError(
            f"{model_dir} holds a {kind!r} export, not a CTranslate2 one: export the run with "
            f"`{commands.command('export', format='ctranslate2')}`, or translate with "
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


@dataclasses.dataclass
class Translations:
    """texts: one translation per input. prepared: the inputs as the model reads them.
    sources: their ids (`source_ids.EncodedSources`: parts cut at sentence ends, `long`).
    cut: {input index: tokens of its longest row} for inputs with a row longer than the
    export's position table (`max_positions` rows), translated in parts that fit it.
    src_tokenizer, trained_len: the export's, for the notes."""

    texts: list[str]
    prepared: list[str]
    sources: EncodedSources
    cut: dict[int, int]
    max_positions: int
    src_tokenizer: Any
    trained_len: int | None
    # Each input's n-best with scores, when asked for (scores=True or decoding options).
    hypotheses: list[Hypotheses] | None = None
    # For the notes on a prefix (`inference.notes.prefix_notes`): the target
    # tokenizer, each input's prefix as prepared ("" = none) and the max_decode_len used.
    tgt_tokenizer: Any = None
    prefixes: list[str] | None = None
    max_decode_len: int | None = None

    def notes(self, first_number: int = 1) -> list[str]:
        """What to tell the user on stderr: the JAX engine's notes on the same inputs
        (`inference.notes`), and for an input cut to fit the position table, that note
        instead of "translated whole". Sentences are numbered from `first_number`."""
        cut = [
            f"note: sentence {first_number + i} has {tokens} tokens"
            f"{' in its longest sentence' if i in self.sources.parts else ''}, more than the "
            f"export's position table ({self.max_positions} rows): translated in parts of at "
            "most that many tokens (export with a larger --max_positions to translate it whole)."
            for i, tokens in self.cut.items()
        ]
        long = {i: n for i, n in self.sources.long.items() if i not in self.cut}
        sources = dataclasses.replace(self.sources, long=long)
        return cut + source_notes(
            self.prepared, sources, self.src_tokenizer, self.trained_len,
            first_number=first_number,
        )  # fmt: skip


def open_translator(
    model_dir: str | Path, *, compute_type: str = "default", intra_threads: int = 0
) -> Any:
    """A `ctranslate2.Translator` of `model_dir` on the CPU, for `translate_detailed`'s
    `translator` across calls (translate's stdin stream: one load, not one per line)."""
    ctranslate2 = import_extra("ctranslate2", "--engine=ctranslate2")
    read_manifest(model_dir)  # a clear error for a directory that is not an export
    return ctranslate2.Translator(
        str(model_dir), device="cpu", compute_type=compute_type, intra_threads=intra_threads
    )


def translate_lines(model_dir: str | Path, sentences: Sequence[str], **options: Any) -> list[str]:
    """Translations of `sentences` (one each, "" for an empty one) by a CTranslate2 export;
    `options` as `translate_detailed`'s."""
    return translate_detailed(model_dir, sentences, **options).texts


def translate_detailed(
    model_dir: str | Path,
    sentences: Sequence[str],
    *,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    max_decode_len: int | None = None,
    segment_len: int | None = None,
    batch_size: int | None = None,
    compute_type: str = "default",
    intra_threads: int = 0,
    translator: Any = None,
    scores: bool = False,
    **options: Any,
) -> Translations:
    """`translate_lines`, with what the notes need (`notes`).

    Every setting left None is the run's (`export.json`; for older exports
    `decoding.defaults.DEFAULTS`, as for every setting an export did not record):
    beam_size: 1 = greedy search. alpha: the length penalty α of our beam search (hypotheses
      rank by log P / ((5 + len) / 6)^α, as in the JAX engine).
    max_len_a, max_len_b, max_decode_len: the output budget, as the JAX engine's: inputs are
      sorted by length into batches of `batch_size`, each generating at most a·W + b tokens,
      W its longest source rounded up to 8 (`decoding.batch_decode`), or `max_decode_len`.
    segment_len: inputs longer than this (tokens with `<eos>`) are translated in parts of whole
      sentences of at most this length; 0 = whole.
    compute_type: CTranslate2's ("default" runs the weights as saved, "int8" quantises).
    translator: an open `ctranslate2.Translator` of `model_dir`, to reuse across calls.
    options: `DecodeOptions` fields beyond beam_size and alpha (nbest, temperature, top_k,
      top_p, seed, prefix: raw text, prepared as the inputs; None = the default); with any,
      or `scores`, `Translations.hypotheses` holds each input's n-best (`nbest_hypotheses`).
      nbest > 1 and a prefix translate every input whole (segment_len 0), as the JAX engine.
    """
    # The [export] extra's library, imported only here: the JAX engine never needs it.
    ctranslate2 = import_extra("ctranslate2", "--engine=ctranslate2")

    model_dir = Path(model_dir)
    manifest = read_manifest(model_dir)
    given = {
        "beam_size": beam_size, "alpha": alpha, "max_len_a": max_len_a, "max_len_b": max_len_b,
        "max_decode_len": max_decode_len, "segment_len": segment_len, "batch_size": batch_size,
    }  # fmt: skip
    # The run's settings (the defaults for older exports), then those given.
    settings = {**DEFAULTS, **manifest.get("decoding", {})}
    settings.update({k: v for k, v in given.items() if v is not None})
    if settings["beam_size"] < 1 or settings["batch_size"] < 1:
        raise ValueError(
            f"beam_size and batch_size must be >= 1, got {settings['beam_size']} and "
            f"{settings['batch_size']}."
        )
    check_segment_len(settings["segment_len"])
    chosen = {k: v for k, v in options.items() if v is not None}
    search = DecodeOptions.from_mapping(
        {"beam_size": settings["beam_size"], "alpha": settings["alpha"], **chosen}
    )
    book_style = bool(manifest.get("book_style", False))
    prefixes = _prepare(search.prefixes(len(sentences)), book_style)
    ranked = scores or search != DecodeOptions(beam_size=search.beam_size, alpha=search.alpha)
    if search.nbest > 1 or any(prefixes):  # n-best and prefixes belong to whole inputs
        settings["segment_len"] = 0
    limit = int(manifest["max_positions"])
    src_tok = load_tokenizer(model_dir / manifest["source_tokenizer"])
    tgt_tok = load_tokenizer(model_dir / manifest["target_tokenizer"])
    if search.sampling:
        # CTranslate2 seeds a worker thread's random generator when that thread first draws,
        # from the seed set then: same seed, same samples only from a translator opened now.
        ctranslate2.set_random_seed(search.seed)
        translator = None
    translator = translator or ctranslate2.Translator(
        str(model_dir), device="cpu", compute_type=compute_type, intra_threads=intra_threads
    )

    prepared = _prepare(sentences, book_style)
    # The JAX engine's rows: one per input, or per part of one cut at sentence ends.
    encoded = encode_sources(
        src_tok, prepared, trained_len=settings["trained_len"],
        segment_len=settings["segment_len"], warn=False,
    )  # fmt: skip
    owner, rows = [], []  # owner[r]: the input row r belongs to; rows: ids ending in <eos>
    cut: dict[int, int] = {}
    for i in range(len(prepared)):
        for row in encoded.rows(i):
            if len(row) > limit:  # beyond the position table: in parts, and a note
                cut[i] = max(cut.get(i, 0), len(row))
            for part in fit_positions(row, limit):
                owner.append(i)
                rows.append(part)

    translated = [""] * len(rows)
    row_nbest: list[list[tuple[list[str], float, float]]] = [[] for _ in rows]
    for batch in sorted_batches([len(r) for r in rows], settings["batch_size"]):
        longest = round_up(max(len(rows[r]) for r in batch), LENGTH_BUCKET)
        budget = output_budget(
            longest, max_len_a=settings["max_len_a"], max_len_b=settings["max_len_b"],
            max_decode_len=settings["max_decode_len"], position_limit=limit,
        )  # fmt: skip
        sources = [[src_tok.id_to_token(t) for t in rows[r][:-1]] for r in batch]  # + <eos>
        if ranked:
            targets = [
                [tgt_tok.id_to_token(t) for t in tgt_tok.encode(prefixes[owner[r]])]
                if prefixes[owner[r]] and (r == 0 or owner[r - 1] != owner[r])
                else []
                for r in batch
            ]  # a prefix starts an input's first row only
            # As the JAX engine (`decode_nbest`): without a fixed max_decode_len, room for the
            # prefix and max_len_b tokens after it (CTranslate2's length counts the prefix).
            longest_prefix = max(map(len, targets))
            if longest_prefix and not settings["max_decode_len"]:
                least = round_up(longest_prefix + settings["max_len_b"], LENGTH_BUCKET)
                budget = min(max(budget, least), limit)
            found = nbest_hypotheses(
                translator, sources, options=search, budget=budget,
                batch_size=settings["batch_size"], prefixes=targets,
                vocab_size=tgt_tok.vocab_size,
            )  # fmt: skip
            for r, hyps in zip(batch, found, strict=True):
                row_nbest[r] = hyps
            best = [hyps[0][0] if hyps else [] for hyps in found]
        else:
            best = best_hypotheses(
                translator, sources, beam_size=settings["beam_size"], alpha=settings["alpha"],
                budget=budget, batch_size=settings["batch_size"],
            )  # fmt: skip
        for r, tokens in zip(batch, best, strict=True):
            translated[r] = tgt_tok.decode([*(tgt_tok.token_to_id(t) for t in tokens), EOS_ID])
    parts_out: list[list[str]] = [[] for _ in prepared]
    for r, text in enumerate(translated):
        parts_out[owner[r]].append(text)
    texts = [join_translations(parts) for parts in parts_out]
    hypotheses = None
    if ranked:
        decode = lambda tokens: tgt_tok.decode([*(tgt_tok.token_to_id(t) for t in tokens), EOS_ID])
        hypotheses = _per_input(len(prepared), owner, row_nbest, decode, search.alpha)
    return Translations(
        texts, prepared, encoded, cut, limit, src_tok, settings["trained_len"], hypotheses,
        tgt_tokenizer=tgt_tok, prefixes=prefixes, max_decode_len=settings["max_decode_len"],
    )  # fmt: skip


def _per_input(count, owner, row_nbest, decode, alpha) -> list[Hypotheses]:
    """Each input's `Hypotheses`: its row's n-best, or its parts' best joined (log P summed,
    scored over the whole length); ("",) with scores 0 for an empty input."""
    rows: list[list[list[tuple[list[str], float, float]]]] = [[] for _ in range(count)]
    for i, hyps in zip(owner, row_nbest, strict=True):
        rows[i].append(hyps)
    out = []
    for parts in rows:
        if not parts or not parts[0]:
            out.append(Hypotheses(("",), (0.0,), (0.0,)))
        elif len(parts) == 1:
            texts = tuple(decode(tokens) for tokens, _, _ in parts[0])
            log_probs = tuple(lp for _, lp, _ in parts[0])
            out.append(Hypotheses(texts, log_probs, tuple(sc for _, _, sc in parts[0])))
        else:
            best = [hyps[0] for hyps in parts]
            log_prob = float(sum(lp for _, lp, _ in best))
            length = sum(len(tokens) + 1 for tokens, _, _ in best)  # with each <eos>
            score = float(log_prob / length_penalty(length, np.float32(alpha), xp=np))
            text = join_translations([decode(tokens) for tokens, _, _ in best])
            out.append(Hypotheses((text,), (log_prob,), (score,)))
    return out


def nbest_hypotheses(
    translator: Any,
    sources: list[list[str]],
    *,
    options: DecodeOptions,
    budget: int,
    batch_size: int,
    prefixes: list[list[str]] | None = None,
    vocab_size: int | None = None,
) -> list[list[tuple[list[str], float, float]]]:
    """Each source's n-best as (tokens without `<eos>`, log P, log P / ((5 + len) / 6)^α),
    best first, by CTranslate2: beam search re-ranked by our length penalty (PATIENCE), its
    greedy search, or `options.nbest` samples (the source repeated; `sampling_temperature`,
    `sampling_topk` (our 0 = all is its 0), `sampling_topp`; `translate_detailed` seeds them).
    `prefixes`: forced target tokens per
    source ([] = none; CTranslate2's `target_prefix`, kept in the output). `vocab_size`: the
    target vocabulary's; a top_k of at least that many is every token (0), as in the JAX
    sampler, where CTranslate2 refuses a top_k over its vocabulary."""
    sampling, n = options.sampling, options.nbest
    copies = n if sampling else 1
    batch = [src for src in sources for _ in range(copies)]
    target_prefix = None
    if prefixes is not None and any(prefixes):
        target_prefix = [p or None for p in prefixes for _ in range(copies)]
    beam = 1 if sampling else options.beam_size
    kwargs = dict(
        max_batch_size=batch_size,
        beam_size=beam,
        max_decoding_length=budget,
        min_decoding_length=0,  # like our search, <eos> may come first
        max_input_length=0,  # never cut a source
        length_penalty=RAW_PENALTY,  # scores are log P: len^1e-30 = 1
        return_scores=True,
        return_end_token=True,
    )
    if sampling:  # seeded by translate_detailed, which opens the translator after
        kwargs.update(
            sampling_temperature=options.temperature,
            sampling_topk=0 if vocab_size and options.top_k >= vocab_size else options.top_k,
            sampling_topp=options.top_p,
        )
    elif beam > 1:
        kwargs.update(patience=PATIENCE, num_hypotheses=max(n, round(beam * PATIENCE)))
    results = translator.translate_batch(batch, target_prefix, **kwargs)
    alpha = np.float32(options.alpha)
    out = []
    for k in range(len(sources)):
        found = [
            (list(tokens), float(score))
            for result in results[k * copies : (k + 1) * copies]
            for tokens, score in zip(result.hypotheses, result.scores, strict=True)
        ]
        ranked = []
        for tokens, log_prob in found:
            # len counts <eos> (kept by return_end_token), as ours does.
            score = float(log_prob / length_penalty(len(tokens), alpha, xp=np))
            ranked.append(
                (tokens[:-1] if tokens and tokens[-1] == EOS else tokens, log_prob, score)
            )
        ranked.sort(key=lambda h: -h[2])  # stable: ties keep CTranslate2's order
        out.append(ranked[:n])
    return out


def fit_positions(row: list[int], limit: int) -> list[list[int]]:
    """`row` (ids ending in `<eos>`) if it has at most `limit` tokens, else its tokens in
    consecutive parts of `limit` - 1, each with its `<eos>`: CTranslate2 cannot run a source
    longer than the exported position table (the JAX engine translates a sinusoidal model's
    over-long sentence whole)."""
    if len(row) <= limit:
        return [row]
    body, size = row[:-1], max(1, limit - 1)
    return [[*body[k : k + size], EOS_ID] for k in range(0, len(body), size)]


def best_hypotheses(
    translator: Any,
    sources: list[list[str]],
    *,
    beam_size: int,
    alpha: float,
    budget: int,
    batch_size: int,
) -> list[list[str]]:
    """The best output tokens (without `<eos>`) for each source (tokens, without `<eos>`):
    CTranslate2's greedy search, or its beam search re-ranked by our length penalty (see
    PATIENCE), at most `budget` tokens with `<eos>`."""
    options = dict(
        max_batch_size=batch_size,
        beam_size=beam_size,
        max_decoding_length=budget,
        min_decoding_length=0,  # like our search, <eos> may come first
        max_input_length=0,  # never cut a source
    )
    if beam_size == 1:  # greedy: no penalty to apply
        return [result.hypotheses[0] for result in translator.translate_batch(sources, **options)]
    results = translator.translate_batch(
        sources, **options, patience=PATIENCE, num_hypotheses=round(beam_size * PATIENCE),
        length_penalty=RAW_PENALTY, return_scores=True, return_end_token=True,
    )  # fmt: skip
    best = []
    for result in results:
        # len counts <eos> (kept by return_end_token), as ours does; a hypothesis cut at the
        # budget has `budget` tokens in both.
        lengths = np.array([len(h) for h in result.hypotheses])
        scores = np.asarray(result.scores, np.float32)  # log P: divided by len^1e-30 = 1
        ranked = scores / length_penalty(lengths, np.float32(alpha), xp=np)
        tokens = result.hypotheses[int(np.argmax(ranked))]  # ties: the first, as top_k
        best.append(tokens[:-1] if tokens and tokens[-1] == EOS else tokens)
    return best
