"""A run's `Truecaser`, learned from the raw (cased) targets of its training pairs.

The stored data of a book-style run is lowercased, so the usual form of each word must come
from the text before preprocessing: for fra_eng the corpus zip's lines whose preprocessed
pair is a training pair (so no validation or test sentence contributes, for any split or
slice); for another TFDS dataset with `book_preprocessing`, its training records as stored.
Learned once per (target language, training text) and cached as JSON beside the
SentencePiece models; a run saves its copy with its tokenizers (`TRUECASER_FILE`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import ml_collections
from absl import logging

from transformer_jax.data import config as config_lib
from transformer_jax.data import corpus, datasets, download, locks, preprocessing
from transformer_jax.data.truecasing import RULE_VERSION, Truecaser, learn_forms
from transformer_jax.runtime.messages import first_line


def _raw_fra_eng_targets(
    cfg: ml_collections.ConfigDict, pairs: set[tuple[str, str]]
) -> list[str] | None:
    """The raw target sides of the corpus lines whose preprocessed pair is in `pairs`; None
    if the zip is not on this machine (the dataset may have been built elsewhere)."""
    try:
        zip_path = download.locate_zip(
            zip_path=cfg.zip_path or None,
            manual_dir=datasets.download_manual_dir(cfg),
            download_dir=Path(cfg.data_dir) / "downloads",
            url=None,  # never download for this alone
        )
    except download.ZipNotFoundError:
        return None
    french = cfg.target_lang == "fr"
    targets = []
    for line in corpus.read_pairs(zip_path):
        en, fr = preprocessing.preprocess_pair(line.english, line.french)
        pair = (en, fr) if cfg.source_lang == "en" else (fr, en)
        if pair in pairs:
            targets.append(line.french if french else line.english)
    return targets


def _raw_catalogue_targets(cfg: ml_collections.ConfigDict) -> list[str]:
    """A TFDS dataset's training targets as stored (before the book's preprocessing)."""
    builder = datasets.prepared_builder(cfg)
    source = builder.as_data_source(split=cfg.train_split)
    texts = (source[i][cfg.target_lang] for i in range(len(source)))
    return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]


def build_truecaser(
    cfg: ml_collections.ConfigDict,
    train_pairs: Sequence[tuple[str, str]],
    cache_dir: str | Path,
) -> Truecaser | None:
    """The run's `Truecaser` (cached in `cache_dir`), None for data not in the book's form.

    Without the raw text (fra_eng's zip not on this machine) the table is empty: translations
    still get punctuation and sentence capitals, not learned names (said in the log).
    """
    if not config_lib.is_book_style(cfg):
        return None
    key = f"{cfg.name}|{cfg.source_lang}|{cfg.target_lang}|rule {RULE_VERSION}"
    hasher = hashlib.sha256(key.encode())
    for src, tgt in train_pairs:
        hasher.update(f"{src}\t{tgt}\n".encode())
    cache_dir = Path(cache_dir)
    path = cache_dir / f"truecaser-{cfg.target_lang}-{hasher.hexdigest()[:12]}.json"
    with locks.exclusive(cache_dir / f".{path.stem}.lock", what=f"learning {path.name}"):
        if path.is_file():
            try:
                return Truecaser.load(path)
            except (OSError, ValueError) as error:  # damaged; derived data, so learn it again
                logging.warning(
                    "The cached truecaser table %s cannot be read (%s): learning it again.",
                    path,
                    first_line(error.__cause__ or error),  # the JSON error, not the advice
                )
        if cfg.name == config_lib.FRA_ENG:
            targets = _raw_fra_eng_targets(cfg, set(train_pairs))
        else:
            targets = _raw_catalogue_targets(cfg)
        if targets is None:
            logging.warning(
                "No fra-eng zip on this machine: translations get punctuation and sentence "
                "capitals but no learned names (set data.zip_path to add them)."
            )
            return Truecaser(cfg.target_lang)
        truecaser = Truecaser(cfg.target_lang, learn_forms(targets))
        try:
            truecaser.save(path)
        except OSError as error:
            if not locks.is_read_only_error(error):
                raise
            logging.warning(
                "Cannot cache the truecaser table in %s (%s): using it uncached.",
                cache_dir,
                first_line(error),
            )
        logging.info(
            "Learned the usual form of %d words from %d training targets (%s)",
            len(truecaser.forms),
            len(targets),
            path,
        )
    return truecaser
