"""Translate text with an exported CTranslate2 model directory: no JAX compilation.

    translate_lines("model_ct2", ["go .", "i lost ."], beam_size=4)  # -> ["va !", ...]

One output per input, in order; an empty input gives "". The engine does what the JAX
engine does, from the settings the run recorded in `export.json`: inputs get the run's
preprocessing (the book's lowercasing and punctuation spacing for fra_eng); an input of
several sentences is translated in parts cut at sentence ends (`data.segmenting`, the run's
`segment_len`); inputs are sorted by length into batches, and each row gets its own output
budget, as in the JAX engine (`decoding.shapes.output_budget` of its own length, at
most `output_cap`), so a sentence translates the same alone or beside longer ones (rows of
one budget go to CTranslate2 together); `<eos>` is never the first token and `<pad>`/`<bos>`
never written (`decoding.search.ruled_out`); beam search ranks by our length penalty with
the run's α (`ct2_search.best_hypotheses`); and the notes on long inputs, `<unk>` words and outputs
cut by their budget are the same (`Translations.notes`, `inference.notes`). Sources are the
tokenizer's ids + `<eos>` (the model's `add_source_eos`), outputs are decoded by the same
tokenizer. One difference: a source longer than the exported position table
(`--max_positions`, 1,024 by default) is translated in parts that fit it, with a note, where
the JAX engine runs a sinusoidal model's over-long sentence whole.

Decoding options (`decoding.options.DecodeOptions`) map onto CTranslate2's where it has
them (`ct2_search.nbest_hypotheses`): n-best (`num_hypotheses`, `return_scores`, ranked by
our length penalty), sampling (`sampling_temperature`, `sampling_topk`: a top_k over the
vocabulary is every token, as ours; `sampling_topp`, seeded by `ctranslate2.set_random_seed`
and a translator opened after it; N samples by repeating the source N times) and a forced
prefix (`target_prefix`; without a fixed max_decode_len the budget holds it and max_len_b
more tokens, as ours). Not the same draws as the JAX engine's sampler (another random
generator), and a sample's log P is CTranslate2's, under its sampling distribution. It does
not ensemble: `ENSEMBLE_ERROR`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformer_jax.data.segmenting import join_translations
from transformer_jax.data.text_form import input_form
from transformer_jax.data.tokenizers import Tokenizer, load_tokenizer
from transformer_jax.data.truecasing import Truecaser
from transformer_jax.data.typography import plain_forms
from transformer_jax.data.vocab import EOS_ID
from transformer_jax.decoding.defaults import DEFAULTS
from transformer_jax.decoding.options import DecodeOptions, Hypotheses
from transformer_jax.decoding.shapes import sorted_batches
from transformer_jax.export.ct2_search import (
    best_hypotheses,
    by_budget,
    fit_positions,
    nbest_hypotheses,
    row_budgets,
)
from transformer_jax.export.extras import import_extra
from transformer_jax.export.manifest import MANIFEST, check_digests, damaged
from transformer_jax.inference.joined_nbest import joined_hypotheses
from transformer_jax.inference.notes import output_notes, source_notes
from transformer_jax.inference.settings import check_segment_len
from transformer_jax.inference.source_ids import EncodedSources, encode_sources
from transformer_jax.runtime import commands

# What the launchers print for an ensemble asked of this engine.
ENSEMBLE_ERROR = "the CTranslate2 engine does not ensemble; use --engine=jax"


# What CTranslate2 loads: the model, its config and the vocabularies (one shared file when
# source and target tokens are the same, else one each).
MODEL_FILES = ("model.bin", "config.json")
SHARED_VOCABULARY = "shared_vocabulary.json"
VOCABULARY_PAIR = ("source_vocabulary.json", "target_vocabulary.json")


def _redo(model_dir: str | Path, manifest: dict[str, Any] | None = None) -> str:
    """The command that writes the export in `model_dir` again (its run, when recorded)."""
    workdir = (manifest or {}).get("workdir") or "RUN"
    return (
        commands.command("export", workdir=workdir, format="ctranslate2", output_dir=model_dir)
        + " --force"
    )


def export_tokenizer(directory: str | Path) -> Tokenizer:
    """`load_tokenizer(directory)`, kept while its files are unchanged (their names, sizes
    and modification times): a server calls `translate_detailed` per request, and loading
    the two tokenizers took 5.1 ms of a one-line call's 7.0 (the README model, beam 4,
    2 EPYC cores). An export written again in its place is read again."""
    directory = Path(directory).resolve()
    try:
        stats = sorted((p.name, p.stat()) for p in directory.iterdir() if p.is_file())
        stamp = tuple((name, st.st_mtime_ns, st.st_size) for name, st in stats)
    except OSError:  # missing or unreadable: load_tokenizer names the problem
        return load_tokenizer(directory)
    return _loaded_tokenizer(str(directory), stamp)


@functools.lru_cache(maxsize=8)
def _loaded_tokenizer(directory: str, stamp: tuple) -> Tokenizer:
    del stamp  # part of the key only
    return load_tokenizer(directory)


def read_manifest(model_dir: str | Path) -> dict[str, Any]:
    """`export.json` of an exported directory, with a clear error when it is missing; an
    older export's `decoding.split_len` is read as today's `segment_len`.

    A manifest that is not JSON naming a format is a `manifest.DamagedExportError` naming
    the directory and the command that writes it again. Cheap (no other file is read): the
    export's files are checked where it is opened (`check_files`).
    """
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{model_dir} has no {MANIFEST}: it is not a directory written by "
            f"`{commands.command('export', format='ctranslate2')}`."
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        what = f"{MANIFEST} is not valid JSON: {error}"
        raise damaged(model_dir, what, _redo(model_dir)) from error
    if not isinstance(manifest, dict) or not manifest.get("format"):
        raise damaged(model_dir, f"{MANIFEST} names no export format", _redo(model_dir))
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


def check_files(model_dir: str | Path, manifest: dict[str, Any]) -> None:
    """A `DamagedExportError` (naming the directory, what is wrong and the command that
    writes it again) for a manifest entry the engine needs or a file of the export that is
    missing, or a file whose sha256 is not the one recorded at export (`manifest`)."""
    redo = _redo(model_dir, manifest)
    root = Path(model_dir)
    for key in ("max_positions", "source_tokenizer", "target_tokenizer"):
        if key not in manifest:
            raise damaged(model_dir, f"{MANIFEST} has no {key!r}", redo)
    missing = [name for name in MODEL_FILES if not (root / name).is_file()]
    if not (root / SHARED_VOCABULARY).is_file():
        missing += [name for name in VOCABULARY_PAIR if not (root / name).is_file()]
    missing += [
        manifest[key]
        for key in ("source_tokenizer", "target_tokenizer")
        if not (root / str(manifest[key])).is_dir()
    ]
    if missing:
        raise damaged(model_dir, f"missing {', '.join(missing)}", redo)
    check_digests(model_dir, manifest, redo)


def _open(ctranslate2: Any, model_dir: str | Path, manifest: dict[str, Any], **kwargs) -> Any:
    """`ctranslate2.Translator(model_dir, device="cpu", **kwargs)`, its load errors (a file
    cut short, a config it cannot parse) a `DamagedExportError`, not a traceback."""
    try:
        return ctranslate2.Translator(str(model_dir), device="cpu", **kwargs)
    except (RuntimeError, ValueError) as error:
        what = f"CTranslate2 cannot load it: {error}"
        raise damaged(model_dir, what, _redo(model_dir, manifest)) from error


def load_truecaser(model_dir: str | Path) -> Truecaser | None:
    """The export's `Truecaser` (translate's natural text), None for data kept as written.
    An export from before tables were kept gets the punctuation and sentence-capital rules
    of no particular language."""
    manifest = read_manifest(model_dir)
    if not manifest.get("book_style", False):
        return None
    path = Path(model_dir) / manifest.get("truecaser", "")
    return Truecaser.load(path) if manifest.get("truecaser") and path.is_file() else Truecaser("")


def target_tokenizer(model_dir: str | Path) -> Tokenizer:
    """The export's target tokenizer, whose vocabulary is what its translations can hold
    (translate checks stdout against it before decoding: `evaluation.stream_encoding`)."""
    manifest = read_manifest(model_dir)
    return export_tokenizer(Path(model_dir) / str(manifest["target_tokenizer"]))


def _prepare(
    sentences: Sequence[str], book_style: bool, plain: Mapping[str, str] | None = None
) -> list[str]:
    """The JAX engine's input handling (`data.text_form.input_form`; `plain` for sources)."""
    return [input_form(s, book=book_style, plain=plain) for s in sentences]


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
    # {input index: tokens of its longest output cut by its budget (no `<eos>`)}, as the
    # JAX engine's `Translations.unfinished`.
    unfinished: dict[int, int] = dataclasses.field(default_factory=dict)

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
        notes = source_notes(
            self.prepared, sources, self.src_tokenizer, self.trained_len,
            first_number=first_number,
        )  # fmt: skip
        return cut + notes + output_notes(self.unfinished, first_number=first_number)


def open_translator(
    model_dir: str | Path, *, compute_type: str = "default", intra_threads: int = 0
) -> Any:
    """A `ctranslate2.Translator` of `model_dir` on the CPU, for `translate_detailed`'s
    `translator` across calls (translate's stdin stream: one load, not one per line)."""
    ctranslate2 = import_extra("ctranslate2", "--engine=ctranslate2")
    manifest = read_manifest(model_dir)  # a clear error for a directory that is not an export
    check_files(model_dir, manifest)
    return _open(
        ctranslate2, model_dir, manifest, compute_type=compute_type, intra_threads=intra_threads
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
      sorted by length into batches of `batch_size`; each row generates at most a·S + b
      tokens, S its own source rounded up to 8, at most `output_cap` (`decoding.
      shapes`), or `max_decode_len`.
    segment_len: inputs longer than this (tokens with `<eos>`) are translated in parts of whole
      sentences of at most this length; 0 = whole.
    compute_type: CTranslate2's ("default" runs the weights as saved, "int8" quantises).
    translator: an open `ctranslate2.Translator` of `model_dir`, to reuse across calls.
    options: `DecodeOptions` fields beyond beam_size and alpha (nbest, temperature, top_k,
      top_p, seed, prefix: raw text, prepared as the inputs; None = the default); with any,
      or `scores`, `Translations.hypotheses` holds each input's n-best (`nbest_hypotheses`).
      An input cut into parts gets its parts' best combinations, as in the JAX engine.
    """
    # The [export] extra's library, imported only here: the JAX engine never needs it.
    ctranslate2 = import_extra("ctranslate2", "--engine=ctranslate2")

    model_dir = Path(model_dir)
    manifest = read_manifest(model_dir)
    if translator is None:  # opened here (below): its files are checked first
        check_files(model_dir, manifest)
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
    limit = int(manifest["max_positions"])
    src_tok = export_tokenizer(model_dir / manifest["source_tokenizer"])
    tgt_tok = export_tokenizer(model_dir / manifest["target_tokenizer"])
    if search.sampling:
        # CTranslate2 seeds a worker thread's random generator when that thread first draws,
        # from the seed set then: same seed, same samples only from a translator opened now.
        ctranslate2.set_random_seed(search.seed)
        translator = None
    translator = translator or _open(
        ctranslate2, model_dir, manifest, compute_type=compute_type, intra_threads=intra_threads
    )

    prepared = _prepare(sentences, book_style, plain_forms(src_tok))
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
    # A prefix starts an input's first row only.
    targets = [
        [tgt_tok.id_to_token(t) for t in tgt_tok.encode(prefixes[owner[r]])]
        if ranked and prefixes[owner[r]] and (r == 0 or owner[r - 1] != owner[r])
        else []
        for r in range(len(rows))
    ]
    budgets = row_budgets(rows, targets, settings, limit)
    unfinished: dict[int, int] = {}
    for batch in sorted_batches([len(r) for r in rows], settings["batch_size"]):
        for budget, group in by_budget(batch, budgets):
            sources = [[src_tok.id_to_token(t) for t in rows[r][:-1]] for r in group]  # + <eos>
            if ranked:
                found = nbest_hypotheses(
                    translator, sources, options=search, budget=budget,
                    batch_size=settings["batch_size"], prefixes=[targets[r] for r in group],
                    vocab_size=tgt_tok.vocab_size,
                )  # fmt: skip
                for r, hyps in zip(group, found, strict=True):
                    row_nbest[r] = hyps
                best = [hyps[0][0] if hyps else [] for hyps in found]
            else:
                best = best_hypotheses(
                    translator, sources, beam_size=settings["beam_size"],
                    alpha=settings["alpha"], budget=budget, batch_size=settings["batch_size"],
                )  # fmt: skip
            for r, tokens in zip(group, best, strict=True):
                translated[r] = tgt_tok.decode([*(tgt_tok.token_to_id(t) for t in tokens), EOS_ID])
                # CTranslate2's budget counts `<eos>` (and a prefix): only an output cut by it
                # has `budget` tokens without one. Stopped there, maybe mid-word: a note.
                if len(tokens) >= budget:
                    unfinished[owner[r]] = max(unfinished.get(owner[r], 0), len(tokens))
    parts_out: list[list[str]] = [[] for _ in prepared]
    for r, text in enumerate(translated):
        parts_out[owner[r]].append(text)
    texts = [join_translations(parts) for parts in parts_out]
    hypotheses = None
    if ranked:
        decode = lambda tokens: tgt_tok.decode([*(tgt_tok.token_to_id(t) for t in tokens), EOS_ID])
        hypotheses = _per_input(len(prepared), owner, row_nbest, decode)
    return Translations(
        texts, prepared, encoded, cut, limit, src_tok, settings["trained_len"], hypotheses,
        tgt_tokenizer=tgt_tok, prefixes=prefixes, max_decode_len=settings["max_decode_len"],
        unfinished=unfinished,
    )  # fmt: skip


def _per_input(count, owner, row_nbest, decode) -> list[Hypotheses]:
    """Each input's `Hypotheses`: its row's n-best, or its parts' best combinations
    (`inference.joined_nbest`; log P and scores summed); ("",) with scores 0 for an empty
    input."""
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
            out.append(joined_hypotheses([[(decode(t), lp, sc) for t, lp, sc in h] for h in parts]))
    return out
