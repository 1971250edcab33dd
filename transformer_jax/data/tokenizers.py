"""The tokenizer protocol, building/caching tokenizers from a config, and checkpoint checks."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import ml_collections
from absl import logging

from transformer_jax.data import locks, sentencepiece_tokenizer
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer
from transformer_jax.data.truecasing import TRUECASER_FILE
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: F401 (re-export)
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.runtime.messages import first_line

_KINDS = {"word": WordTokenizer, "sentencepiece": SentencePieceTokenizer}


@runtime_checkable
class Tokenizer(Protocol):
    """What the rest of the framework may rely on, for both tokenizers."""

    kind: str

    @property
    def vocab_size(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def token_to_id(self, token: str) -> int: ...

    def id_to_token(self, index: int) -> str: ...

    def save(self, directory: str | Path) -> None: ...


class VocabularyMismatchError(ValueError):
    """The tokenizer's vocabulary is not the one a checkpoint was trained with."""


def check_vocabulary(
    tokenizer: Tokenizer, expected_fingerprint: str, expected_vocab_size: int, *, what: str = ""
) -> None:
    """Raises `VocabularyMismatchError` unless `tokenizer` is the vocabulary a checkpoint used.

    Token ids are only meaningful with the exact vocabulary the embeddings were trained on; a
    retrained SentencePiece model with the same size still maps ids to different pieces.
    """
    problems = []
    if tokenizer.vocab_size != expected_vocab_size:
        problems.append(f"vocab_size {tokenizer.vocab_size} != {expected_vocab_size}")
    if tokenizer.fingerprint != expected_fingerprint:
        problems.append(f"fingerprint {tokenizer.fingerprint} != {expected_fingerprint}")
    if problems:
        label = f"{what} " if what else ""
        raise VocabularyMismatchError(
            f"{label}{tokenizer.kind} tokenizer does not match the checkpoint: "
            f"{'; '.join(problems)}. Load the tokenizer saved with the checkpoint "
            "(`load_tokenizers(<checkpoint dir>)`) instead of building a new one, or start "
            "training from scratch."
        )


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """Loads a tokenizer saved with `tokenizer.save(directory)`, whichever kind it is."""
    meta_file = Path(directory) / "tokenizer.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"no tokenizer saved in {directory} (missing {meta_file.name}).")
    kind = json.loads(meta_file.read_text(encoding="utf-8"))["kind"]
    return _KINDS[kind].load(directory)


def save_tokenizers(
    source: Tokenizer, target: Tokenizer, directory: str | Path, *, truecaser: Any = None
) -> None:
    """Saves a (source, target) pair in `directory/source` and `directory/target`, and
    `truecaser` (a `truecasing.Truecaser`, if given) as `directory/truecaser.json`, replacing
    whatever `directory` held.

    Atomic: everything is written into a temporary sibling folder that is then renamed into
    place, so a kill leaves the whole new folder or none (a run's `tokenizer/` cut short, e.g.
    without its `tokenizer.json`, could never be loaded again). The next save removes what a
    killed one left.
    """
    directory = Path(directory)
    staging = directory.with_name(f".{directory.name}.tmp")
    replaced = directory.with_name(f".{directory.name}.old")
    for leftover in (staging, replaced):
        _remove(leftover)
    source.save(staging / "source")
    target.save(staging / "target")
    if truecaser is not None:
        truecaser.save(staging / TRUECASER_FILE)
    if directory.exists() or directory.is_symlink():
        os.rename(directory, replaced)  # a folder cannot be renamed over a non-empty one
    os.rename(staging, directory)
    _remove(replaced)


def _remove(path: Path) -> None:
    """Deletes a file or a folder tree, if there is one."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def load_tokenizers(directory: str | Path) -> tuple[Tokenizer, Tokenizer]:
    """Inverse of `save_tokenizers`; returns one object twice if both sides are identical."""
    source = load_tokenizer(Path(directory) / "source")
    target = load_tokenizer(Path(directory) / "target")
    if source.fingerprint == target.fingerprint and source.kind == target.kind:
        target = source
    return source, target


def _text_hash(sentences: Sequence[str]) -> str:
    hasher = hashlib.sha256()
    for sentence in sentences:
        hasher.update(sentence.encode())
        hasher.update(b"\n")
    return hasher.hexdigest()[:12]


def _cached_sentencepiece(
    sentences: Sequence[str], cfg: ml_collections.ConfigDict, side: str, cache_dir: Path
) -> SentencePieceTokenizer:
    """Trains SentencePiece once per (settings, training text) and reuses the saved model.

    The cache key holds the hash of the exact training sentences, so a different split, slice,
    dataset or preprocessing never silently reuses a stale model, and the trainer's thread
    count (`t2`), which changes the model: a cache trained with the machine's cores, before
    the count was fixed, is not reused.
    """
    threads = sentencepiece_tokenizer.TRAIN_THREADS
    key = f"spm-{cfg.sp_model_type}-{cfg.vocab_size}-{side}-t{threads}-{_text_hash(sentences)}"
    directory = cache_dir / key
    # One process trains; others started at the same time wait and load its model.
    with locks.exclusive(cache_dir / f".{key}.lock", what=f"training SentencePiece {key}"):
        if (directory / "tokenizer.json").is_file():
            try:
                tokenizer = SentencePieceTokenizer.load(directory)
            except (OSError, RuntimeError) as error:  # damaged; derived data, so train it again
                logging.warning(
                    "The cached SentencePiece model in %s cannot be read (%s): training it again.",
                    directory,
                    first_line(error),
                )
            else:
                logging.info("Reusing SentencePiece model %s", directory)
                return tokenizer
        logging.info("Training SentencePiece (%s) on %d sentences", key, len(sentences))
        tokenizer = SentencePieceTokenizer.train(
            sentences, vocab_size=cfg.vocab_size, model_type=cfg.sp_model_type
        )
        try:
            tokenizer.save(directory)
        except OSError as error:
            if not locks.is_read_only_error(error):
                raise
            logging.warning(
                "Cannot cache the SentencePiece model in %s (%s): using it uncached; "
                "the next run trains it again.",
                cache_dir,
                first_line(error),
            )
    return tokenizer


def build_tokenizers(
    cfg: ml_collections.ConfigDict,
    train_pairs: Sequence[tuple[str, str]],
    cache_dir: str | Path,
) -> tuple[Tokenizer, Tokenizer]:
    """(source, target) tokenizers from the TRAINING pairs only; the same object twice if shared.

    Word: the book's vocabulary (min_freq) per side, or over both sides if shared.
    SentencePiece: trained once and cached in `cache_dir`, reused on the next run.
    """
    if not train_pairs:
        raise ValueError(
            f"no training pairs to build tokenizers from (data.train_split={cfg.train_split!r})."
        )
    sources = [src for src, _ in train_pairs]
    targets = [tgt for _, tgt in train_pairs]
    cache_dir = Path(cache_dir)
    if cfg.tokenizer == "word":
        if cfg.shared_vocab:
            shared = WordTokenizer.train(sources + targets, cfg.min_freq)
            return shared, shared
        return (
            WordTokenizer.train(sources, cfg.min_freq),
            WordTokenizer.train(targets, cfg.min_freq),
        )
    if cfg.tokenizer == "sentencepiece":
        if cfg.shared_vocab:
            shared = _cached_sentencepiece(sources + targets, cfg, "shared", cache_dir)
            return shared, shared
        return (
            _cached_sentencepiece(sources, cfg, cfg.source_lang, cache_dir),
            _cached_sentencepiece(targets, cfg, cfg.target_lang, cache_dir),
        )
    raise ValueError(f"data.tokenizer={cfg.tokenizer!r}; choose one of {sorted(_KINDS)}.")
