"""The data config: every knob of the input pipeline, with its default for the fra-eng run.

`data_config()` is the one place the data defaults live; `validate_data_config` is the data part
of `training.validate_config`, which runs once before anything is built.
"""

from __future__ import annotations

import os
from pathlib import Path

import ml_collections

from transformer_jax.data import bucketing, catalogue, splitting
from transformer_jax.data.encoding import LONG_PAIRS
from transformer_jax.runtime.commands import is_source_checkout

# transformer_jax/data/config.py -> repository root. Not the cwd: tests and scripts run anywhere.
REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_ZIP = (REPO_ROOT / ".." / "shared" / "data" / "fra-eng.zip").resolve()


def default_data_dir() -> Path:
    """Where TFDS builds and reads datasets unless `data.data_dir` says otherwise.

    `$TFDS_DATA_DIR` if set; else, in a source checkout, its git-ignored `data/tfds` (runs then
    never depend on ~/tensorflow_datasets); else TFDS's own default, ~/tensorflow_datasets.
    Never inside an installed package.
    """
    if os.environ.get("TFDS_DATA_DIR"):
        return Path(os.environ["TFDS_DATA_DIR"]).expanduser()
    if is_source_checkout():
        return REPO_ROOT / "data" / "tfds"  # git-ignored (`/data/` in .gitignore)
    return Path("~/tensorflow_datasets").expanduser()


TOKENIZERS = ("word", "sentencepiece")
SP_MODEL_TYPES = ("unigram", "bpe")
FRA_ENG = "fra_eng"
# The fra_eng builder's splits (fra_eng.py): hashed train/validation/test, and every pair in
# file order ("full", for the book's parity slice).
FRA_ENG_SPLITS = (*splitting.SPLIT_NAMES, "full")
SPLIT_KEYS = ("train_split", "eval_split", "test_split")


def is_book_style(cfg: ml_collections.ConfigDict) -> bool:
    """Whether a data config's text is the book's form (lowercased, `, . ! ?` spaced off):
    fra_eng always, another dataset with `book_preprocessing`."""
    return cfg.name == FRA_ENG or bool(cfg.book_preprocessing)


def data_config() -> ml_collections.ConfigDict:
    """Default data config for the fra-eng (English -> French) run."""
    c = ml_collections.ConfigDict()
    # Dataset: "fra_eng" (the d2l corpus, built by our TFDS builder) or any TFDS translation
    # dataset name with config, e.g. "wmt14_translate/de-en", "ted_hrlr_translate/pt_to_en".
    c.name = FRA_ENG
    # Feature keys of source and target; fra_eng has "en" and "fr" (the book translates en->fr).
    c.source_lang = "en"
    c.target_lang = "fr"
    # The book's preprocessing (lowercase, punctuation spacing) for datasets other than fra_eng
    # (which is always stored preprocessed). Off: only strip surrounding whitespace.
    c.book_preprocessing = False
    # fra_eng only: local zip. Default: the shared copy if present, else "" = look in the TFDS
    # manual dir, then download from `url`.
    c.zip_path = str(SHARED_ZIP) if SHARED_ZIP.is_file() else ""
    # fra_eng only: download URL ("" = never download).
    c.url = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"
    # fra_eng only: if set, the zip (local or downloaded) must have this sha256; "" = downloads
    # must match a known digest of the d2l file and local files are taken as they are.
    c.zip_sha256 = ""
    # Where TFDS builds and reads datasets; tokenizers are cached in `<data_dir>/tokenizers`.
    # $TFDS_DATA_DIR, else the checkout's git-ignored data/tfds, else ~/tensorflow_datasets.
    c.data_dir = str(default_data_dir())
    # TFDS split strings (slicing allowed). fra_eng also has "full" (all pairs in file order).
    # Book parity (d2l load_data_nmt(num_examples=600)): train_split="full[:601]", because the
    # book's tokenize_nmt stops only when `i > num_examples`, so it keeps lines 0..600.
    c.train_split = "train"
    c.eval_split = "validation"
    c.test_split = "test"
    # fra_eng only: split by hash of the English sentence (see splitting.py).
    c.validation_fraction = 0.05
    c.test_fraction = 0.05
    c.split_seed = 0
    # "word" (the book's Vocab: split on spaces, min_freq) or "sentencepiece" (default).
    c.tokenizer = "sentencepiece"
    # SentencePiece vocabulary size (per side unless shared), including the 4 special tokens.
    c.vocab_size = 8000
    c.sp_model_type = "unigram"  # "unigram" | "bpe"
    # Subword regularization (data/sampling.py): > 0 trains on a fresh segmentation of each
    # sentence every time it is read, drawn with probability ∝ P(x)^alpha from the
    # `sp_sampling_nbest` best (-1 = all; unigram), or BPE-dropout with this probability
    # (bpe). Translation and evaluation keep the best segmentation. 0 = off.
    c.sp_sampling_alpha = 0.0
    c.sp_sampling_nbest = -1
    # Processes that draw the next batches' segmentations ahead (data/sampling_pool.py); the
    # batches are the same with any number. -1 = auto: none on a CPU, 4 on a GPU/TPU (at most
    # the cores less one), where drawing in the training process would set the step's pace.
    c.sampling_workers = -1
    # One vocabulary for both sides (one tokenizer object) or one per side. Shared by default:
    # the English side of fra-eng alone is too small for an 8000-piece unigram model.
    c.shared_vocab = True
    # Word tokenizer: tokens seen fewer times in training become <unk> (the book uses 2).
    c.min_freq = 2
    # Length limits per side, in tokens with <eos>. A translator learns from whole pairs:
    # with long_pairs="skip" a longer pair is left out (and counted in the log), never cut.
    # 64 keeps 99.99 % of fra-eng pairs whole with SentencePiece 2k per side (the data log
    # prints the percentiles; p99.9 is 33 source / 42 target tokens).
    c.max_src_len = 64
    c.max_tgt_len = 64
    # "skip" (whole pairs only) or "truncate" (the book's truncate_pad to num_steps, which
    # the d2l variant keeps for parity; it may cut off a sentence and its <eos>).
    c.long_pairs = "skip"
    # Concatenation augmentation (data/augment.py): add this many joined pairs ("a . b ." on
    # both sides) per real training pair, drawn once with `shuffle_seed`, so that long inputs
    # and outputs are not rare in training. 0 = off (the book's setting).
    c.concat_fraction = 0.0
    # GLOBAL batch size in examples, split over process_count * local devices.
    c.batch_size = 128
    # > 0: training batches of about this many padded tokens per side instead (fairseq's
    # --max-tokens): rows = batch_tokens // bucket width, so short buckets get many rows and
    # long ones few, and every step carries a similar amount of text. Needs bucketing;
    # eval batches keep batch_size rows. 0 = batch_size rows for every bucket.
    c.batch_tokens = 0
    # Length bucketing for training batches (pads to the smallest boundary that fits).
    c.bucketing = True
    # Packed rows instead of buckets (data/packing.py): each training row of max_src_len /
    # max_tgt_len tokens holds several whole pairs, attention stays within each pair, and one
    # batch shape means one compiled step. Rows a batch: batch_tokens // max length (or
    # batch_size). Needs bucketing=False. Evaluation batches keep one pair a row.
    c.packing = False
    # Padded lengths used with bucketing; () = every `bucket_step` tokens up to the max length.
    # A small fixed set, so a jitted step compiles once per boundary only.
    c.bucket_boundaries = ()
    c.bucket_step = 8
    c.shuffle_seed = 0
    # Drop the examples that do not fill a last global batch (a different few each epoch), or
    # keep them as one last batch padded with zero-weight dummy rows (fixed shapes), as the
    # book's DataLoader does (drop_last=False; the d2l variant: 601 pairs = 10 batches of 64).
    c.drop_remainder = True
    # Evaluate on n examples spread evenly over the eval split (its stored order runs from
    # short to long sentences, so not the first n); 0 = all.
    c.num_eval_examples = 0
    return c


# The data config's paths on this machine, made absolute by `resolve_paths`.
PATH_KEYS = ("data_dir", "zip_path")


def resolve_paths(cfg: ml_collections.ConfigDict) -> None:
    """Makes `data_dir` and `zip_path` absolute in place (`~` expanded, a relative path taken
    from the current directory), so that the config a run records (config.json) names the same
    dataset and zip when evaluate, translate or a resume run from another directory. "" stays
    "" (no local zip), and so does a URL (`gs://...`, which TFDS reads as it is)."""
    for key in PATH_KEYS:
        value = cfg[key]
        if isinstance(value, str | os.PathLike) and str(value) and "://" not in str(value):
            cfg[key] = os.path.abspath(os.path.expanduser(value))


def validate_data_config(
    cfg: ml_collections.ConfigDict, *, num_devices: int = 1, process_count: int = 1
) -> None:
    """Raises ValueError naming the bad value and the valid choices; builds and reads nothing.

    `check_data_values` (the config alone), then `check_data_devices` (its batch over the
    devices).
    """
    check_data_values(cfg)
    check_data_devices(cfg, num_devices=num_devices, process_count=process_count)


def check_data_devices(
    cfg: ml_collections.ConfigDict, *, num_devices: int, process_count: int
) -> None:
    """Raises ValueError unless the global batch splits over process_count · num_devices."""
    shards = process_count * num_devices
    if cfg.batch_size <= 0 or (cfg.batch_size % shards and not budget_sets_rows(cfg)):
        raise ValueError(
            f"data.batch_size={cfg.batch_size} must be a positive multiple of process_count * "
            f"devices = {process_count} * {num_devices} = {shards}; e.g. "
            f"{max(shards, cfg.batch_size // shards * shards)}."
        )
    if cfg.batch_tokens and cfg.batch_tokens < max(cfg.max_src_len, cfg.max_tgt_len) * shards:
        raise ValueError(
            f"data.batch_tokens={cfg.batch_tokens} is below one row of the longest bucket per "
            f"device: max length {max(cfg.max_src_len, cfg.max_tgt_len)} x {shards} shards; "
            f"use >= {max(cfg.max_src_len, cfg.max_tgt_len) * shards}."
        )


def budget_sets_rows(cfg: ml_collections.ConfigDict) -> bool:
    """Whether `batch_tokens` sets the training batches' rows (packed rows or length buckets);
    `batch_size` then sizes the eval batches only (`eval_rows`)."""
    return bucketing.by_token_budget(cfg.batch_tokens, cfg.packing, cfg.bucketing)


def eval_rows(cfg: ml_collections.ConfigDict, shards: int, rows: int = 0) -> int:
    """Global rows of a loss batch (validation, test): `rows` (the run's
    `eval.loss_batch_size`) if > 0, else `batch_size`, rounded up to a multiple of `shards`
    (processes · devices; dummy rows of zero weight fill the rest). The loss is a sum over
    tokens, so the rows change its memory, never its value. Where `batch_size` sets the
    training rows it is a multiple already (`check_data_devices`)."""
    return -(-(rows or cfg.batch_size) // shards) * shards


def train_batch_rows(cfg: ml_collections.ConfigDict, shards: int) -> dict[str, int]:
    """Global rows of every batch shape the train iterator makes (`data.batching`), each named
    by what sets it: `batch_size` rows, or with `batch_tokens` the rows of the packed width or
    of each bucket's width that fit the budget (`bucketing.token_budget_rows`; `shards` =
    processes · devices a process)."""
    if not budget_sets_rows(cfg):
        return {f"data.batch_size={cfg.batch_size}": cfg.batch_size}
    if cfg.packing:
        widths: tuple[int, ...] = (max(cfg.max_src_len, cfg.max_tgt_len),)
    else:
        widths = bucketing.resolve_boundaries(
            cfg.bucket_boundaries, cfg.bucket_step, cfg.max_src_len, cfg.max_tgt_len
        )
    kind = "packed rows" if cfg.packing else "bucket"
    return {
        f"{kind} of {width} tokens": bucketing.token_budget_rows(cfg.batch_tokens, width, shards)
        for width in widths
    }


def check_data_values(cfg: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the bad key or value and the choices (devices aside).

    The dataset name is looked up in TFDS's registry and every split string is parsed; the
    split names are checked where they are known before the dataset is built (fra_eng).
    The one change it makes: relative paths become absolute (`resolve_paths`), so that the
    run records where its data is.
    """
    expected = set(data_config().keys())
    unknown = set(cfg.keys()) - expected
    missing = expected - set(cfg.keys())
    if unknown or missing:
        raise ValueError(
            f"data config keys: unknown {sorted(unknown)}, missing {sorted(missing)}; "
            f"valid keys are {sorted(expected)}."
        )
    resolve_paths(cfg)
    if cfg.tokenizer not in TOKENIZERS:
        raise ValueError(f"data.tokenizer={cfg.tokenizer!r}; choose one of {TOKENIZERS}.")
    if cfg.sp_model_type not in SP_MODEL_TYPES:
        raise ValueError(
            f"data.sp_model_type={cfg.sp_model_type!r}; choose one of {SP_MODEL_TYPES}."
        )
    for key in ("max_src_len", "max_tgt_len"):
        if cfg[key] < 2:
            raise ValueError(
                f"data.{key}={cfg[key]} is too short: a sequence needs a token and <eos>; use >= 2."
            )
    if cfg.long_pairs not in LONG_PAIRS:
        raise ValueError(
            f"data.long_pairs={cfg.long_pairs!r}; choose one of {LONG_PAIRS} ('skip' keeps "
            "whole pairs only, 'truncate' is the book's truncate_pad)."
        )
    if not 0 <= cfg.concat_fraction <= 1:
        raise ValueError(
            f"data.concat_fraction={cfg.concat_fraction} must be in [0, 1]: joined pairs per "
            "real training pair (0 = off)."
        )
    if cfg.concat_fraction and cfg.long_pairs != "skip":
        raise ValueError(
            "data.concat_fraction > 0 needs data.long_pairs='skip': joined pairs must be whole."
        )
    if cfg.sp_sampling_alpha:
        if cfg.tokenizer != "sentencepiece":
            raise ValueError(
                f"data.sp_sampling_alpha={cfg.sp_sampling_alpha} samples SentencePiece "
                f"segmentations, but data.tokenizer={cfg.tokenizer!r}; use 'sentencepiece' or 0."
            )
        if not 0 < cfg.sp_sampling_alpha <= 1:
            raise ValueError(
                f"data.sp_sampling_alpha={cfg.sp_sampling_alpha} must be in (0, 1] (unigram: "
                "the smoothing of P(x)^alpha; bpe: the dropout probability), or 0 = off."
            )
        if not isinstance(cfg.sampling_workers, int) or cfg.sampling_workers < -1:
            raise ValueError(
                f"data.sampling_workers={cfg.sampling_workers!r}: a number of processes >= 0, "
                "or -1 for auto (none on a CPU, 4 on an accelerator)."
            )
        if cfg.sp_sampling_nbest != -1 and cfg.sp_sampling_nbest < 2:
            raise ValueError(
                f"data.sp_sampling_nbest={cfg.sp_sampling_nbest}: sample from the n >= 2 best "
                "segmentations, or -1 for all of them."
            )
    if cfg.tokenizer == "sentencepiece" and cfg.vocab_size < 16:
        raise ValueError(f"data.vocab_size={cfg.vocab_size} is too small; use e.g. 8000.")
    if cfg.min_freq < 1:
        raise ValueError(f"data.min_freq={cfg.min_freq} must be >= 1 (the book uses 2).")
    if not isinstance(cfg.packing, bool):
        raise ValueError(f"data.packing={cfg.packing!r} must be True or False.")
    if cfg.packing and cfg.bucketing:
        raise ValueError(
            "data.packing=True fills rows of one width and replaces length buckets: set "
            "data.bucketing=False as well (or data.packing=False)."
        )
    if cfg.batch_tokens < 0 or (cfg.batch_tokens and not (cfg.bucketing or cfg.packing)):
        raise ValueError(
            f"data.batch_tokens={cfg.batch_tokens} needs data.bucketing=True or "
            "data.packing=True, and a value >= 0 (0 = batch_size rows per batch)."
        )
    if cfg.bucketing:
        boundaries = list(cfg.bucket_boundaries)
        if boundaries != sorted(set(boundaries)) or (boundaries and boundaries[0] < 2):
            raise ValueError(
                f"data.bucket_boundaries={tuple(boundaries)} must be strictly increasing and >= 2."
            )
        if not boundaries and cfg.bucket_step < 1:
            raise ValueError(f"data.bucket_step={cfg.bucket_step} must be >= 1.")
    if not isinstance(cfg.drop_remainder, bool):
        raise ValueError(
            f"data.drop_remainder={cfg.drop_remainder!r} must be True (drop a last partial "
            "batch) or False (keep it, filled with zero-weight dummy rows)."
        )
    if cfg.num_eval_examples < 0:
        raise ValueError(f"data.num_eval_examples={cfg.num_eval_examples}; use 0 (all) or n > 0.")
    if cfg.name != FRA_ENG:
        catalogue.check_dataset_name(cfg.name)
    for key in SPLIT_KEYS:
        catalogue.check_split(
            f"data.{key}", cfg[key], FRA_ENG_SPLITS if cfg.name == FRA_ENG else None
        )
    if cfg.name == FRA_ENG:
        if (cfg.source_lang, cfg.target_lang) not in (("en", "fr"), ("fr", "en")):
            raise ValueError(
                f"fra_eng has languages 'en' and 'fr', got source_lang={cfg.source_lang!r}, "
                f"target_lang={cfg.target_lang!r}."
            )
        splitting.check_fractions(cfg.validation_fraction, cfg.test_fraction)
    elif cfg.source_lang == cfg.target_lang:
        raise ValueError(f"data.source_lang and data.target_lang are both {cfg.source_lang!r}.")
