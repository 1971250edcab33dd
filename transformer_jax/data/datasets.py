"""The datasets: the TFDS builder a data config names, and the raw sentence pairs of a split,
read with `tfds.data_source` (array_record, no TensorFlow).

`fra_eng` is built by our own builder (fra_eng.py); any other name is a TFDS catalogue dataset
whose features `source_lang` / `target_lang` hold the two sides (e.g. "wmt14_translate/de-en").
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import ml_collections
import numpy as np
import tensorflow_datasets as tfds
from absl import logging
from google.protobuf.json_format import ParseError
from google.protobuf.message import DecodeError
from tensorflow_datasets.proto import tf_example_pb2

from transformer_jax.data import config as config_lib
from transformer_jax.data import download, fra_eng, locks, preprocessing
from transformer_jax.runtime.messages import first_line


class DatasetReadError(ValueError):
    """The built dataset on disk cannot be used (damaged, half-deleted or built from another
    zip); the message names its folder and says how to rebuild it."""


# What reading the records of a damaged build raises: array_record's "Corrupted Riegeli/records
# file" and "open() failed" for a missing shard (RuntimeError), protobuf's DecodeError, text
# or features that are not ours. Not ValueError at large: a bad split name is the caller's.
_READ_ERRORS = (RuntimeError, OSError, DecodeError, UnicodeDecodeError, IndexError, KeyError)


def _damaged(
    folder: str | Path, cfg: ml_collections.ConfigDict, what: str, error: BaseException
) -> DatasetReadError:
    """The one message for a build on disk that cannot be used: what failed, and the fix
    (delete `folder`, the build, and run again to rebuild it from its source)."""
    origin = (
        f"the corpus ({cfg.zip_path or cfg.url})"
        if cfg.name == config_lib.FRA_ENG
        else "its source"
    )
    return DatasetReadError(
        f"the {cfg.name} dataset built in {folder} cannot be read ({what}: "
        f"{first_line(error).rstrip('.')}). "
        f"It is built data, not the corpus: delete {folder} and run again to rebuild it from "
        f"{origin}."
    )


@contextlib.contextmanager
def _reading(
    builder: tfds.core.DatasetBuilder, cfg: ml_collections.ConfigDict, split: str
) -> Iterator[None]:
    """Turns a failed read of a built split's records into one `DatasetReadError` naming the
    fix. Only the reads: opening the split (its name and slice) raises as it did."""
    try:
        yield
    except DatasetReadError:
        raise
    except _READ_ERRORS as error:
        raise _damaged(builder.data_path, cfg, f"{split} split", error) from error


# What opening a build with a damaged or emptied dataset_info.json / metadata.json raises
# (protobuf's ParseError, json's JSONDecodeError); not ValueError at large: a config mistake is one.
_INFO_ERRORS = (ParseError, json.JSONDecodeError, UnicodeDecodeError)
_NO_INFO = "dataset_info.json missing or damaged"


class SplitError(ValueError):
    """A split name or slice the built dataset does not have; the message lists its splits."""


def _data_source(
    builder: tfds.core.DatasetBuilder, cfg: ml_collections.ConfigDict, split: str, **kwargs
):
    """`builder.as_data_source(split)` and its length; a split or slice the dataset does not
    have (a typo, `train[:2000]` of 108 pairs) is a `SplitError` listing the splits there are,
    and a build whose info lists no splits at all (dataset_info.json deleted) is damaged."""
    try:
        source = builder.as_data_source(split=split, **kwargs)
        return source, len(source)
    except KeyError as error:  # TFDS: "Trying to access `splits[...]` but `splits` is empty"
        if builder.info.splits:
            raise
        reason = ValueError("no splits listed")
        raise _damaged(builder.data_path, cfg, _NO_INFO, reason) from error
    except ValueError as error:
        sizes = ", ".join(
            f"{name} {info.num_examples:,}" for name, info in builder.info.splits.items()
        )
        raise SplitError(
            f"split {split!r} cannot be read from {builder.name} ({first_line(error)}); its "
            f"splits and sizes: {sizes} (TFDS slices: train[:1000], train[10%:], ...)."
        ) from error


def fra_eng_builder(cfg: ml_collections.ConfigDict) -> fra_eng.FraEng:
    """The fra_eng builder for this config (split fractions/seed select the builder config)."""
    known = {"sha256": frozenset({cfg.zip_sha256.lower()})} if cfg.zip_sha256 else None
    return fra_eng.FraEng(
        data_dir=cfg.data_dir,
        config=fra_eng.select_config(cfg.validation_fraction, cfg.test_fraction, cfg.split_seed),
        file_format="array_record",
        zip_path=cfg.zip_path or None,
        url=cfg.url or None,
        known_digests=known,
    )


T = TypeVar("T")

_RAW = tfds.decode.DeserializeMethod.RAW_BYTES


@functools.cache
def _import_catalogue() -> None:
    # Some builders (the WMT family) are not registered by `import tensorflow_datasets` alone.
    import tensorflow_datasets.translate  # noqa: F401


def catalogue_builder(cfg: ml_collections.ConfigDict) -> tfds.core.DatasetBuilder:
    """A TFDS catalogue builder by name, e.g. "ted_hrlr_translate/pt_to_en"."""
    try:
        return tfds.builder(cfg.name, data_dir=cfg.data_dir, file_format="array_record")
    except tfds.core.registered.DatasetNotFoundError:
        _import_catalogue()
        return tfds.builder(cfg.name, data_dir=cfg.data_dir, file_format="array_record")


def prepared_builder(cfg: ml_collections.ConfigDict) -> tfds.core.DatasetBuilder:
    """The builder for `cfg.name`, built as array_record first if it is not on disk yet.

    One process builds at a time (`locks.exclusive` on a file in data_dir): runs started
    together on one data_dir wait for the first build and then read it. A build on disk whose
    info files are damaged or missing, and a build that fails for want of disk space or write
    access, are one `DatasetReadError` naming the folder and the fix.
    """
    lock = Path(cfg.data_dir) / f".{cfg.name.replace('/', '__')}.build.lock"
    with locks.exclusive(lock, what=f"building {cfg.name}"):
        # Created under the lock, so a waiting process sees the finished dataset.
        try:  # TFDS reads the build's dataset_info.json (and metadata.json) here
            if cfg.name == config_lib.FRA_ENG:
                builder = fra_eng_builder(cfg)
                _check_same_zip(builder, cfg)
            else:
                builder = catalogue_builder(cfg)
        except _INFO_ERRORS as error:
            folder = build_dir(cfg)
            raise _damaged(folder, cfg, "dataset_info.json or metadata.json", error) from error
        if cfg.name == config_lib.FRA_ENG and cfg.zip_path and not builder.is_prepared():
            # A given zip that is not there: named before TFDS starts a build.
            download.check_zip_path(cfg.zip_path, download_manual_dir(cfg), cfg.url)
        if not builder.is_prepared():
            _remove_stale_builds(Path(str(builder.data_path)).parent)
        # A no-op when the dataset is already in data_dir.
        try:
            builder.download_and_prepare(
                file_format="array_record",
                download_config=tfds.download.DownloadConfig(
                    manual_dir=str(download_manual_dir(cfg))
                    if cfg.name == config_lib.FRA_ENG
                    else None
                ),
            )
        except (OSError, RuntimeError) as error:
            problem = _unwritable(error, builder, cfg) or _unreachable(error, cfg)
            if problem is None:
                raise
            raise problem from error
        if cfg.name == config_lib.FRA_ENG:
            _check_complete(builder, cfg)
    return builder


def _remove_stale_builds(folder: Path) -> None:
    """Removes the `incomplete.*` folders of earlier builds in `folder` (called under the
    build lock, so no build is writing them). TFDS removes its half-written build when the
    build fails with an exception, not when the process is killed: each killed build left
    one behind for good, up to the size of a whole build."""
    for stale in sorted(folder.glob("incomplete.*")):
        if stale.is_dir():
            logging.info("Removing %s, left by a build that was stopped.", stale)
            shutil.rmtree(stale, ignore_errors=True)


def build_dir(cfg: ml_collections.ConfigDict) -> Path:
    """The folder a build of this config lives in, found without opening it: fra_eng's
    `<data_dir>/fra_eng/<split config>/<version>`, another dataset's `<data_dir>/<name>`."""
    if cfg.name != config_lib.FRA_ENG:
        return Path(cfg.data_dir) / cfg.name
    name = fra_eng.config_name(cfg.validation_fraction, cfg.test_fraction, cfg.split_seed)
    return Path(cfg.data_dir) / config_lib.FRA_ENG / name / str(fra_eng.FraEng.VERSION)


def _unreachable(
    error: OSError | RuntimeError, cfg: ml_collections.ConfigDict
) -> download.DownloadError | None:
    """A catalogue dataset whose source could not be fetched (no network, a host that does
    not resolve, a refused connection: `requests`' errors are OSErrors) as one
    `download.DownloadError` naming the dataset and what to do; None for anything else.
    fra_eng's own download path has its own messages (`download`)."""
    if cfg.name == config_lib.FRA_ENG or not _is_connection_error(error):
        return None
    return download.DownloadError(
        f"Could not download the TFDS dataset {cfg.name!r} ({first_line(error)}). Build it "
        f"on a machine that can reach its source (`tfds build {cfg.name} --data_dir=DIR "
        "--file_format=array_record`), copy DIR here and pass it as "
        "--config.data.data_dir=DIR."
    )


def _is_connection_error(error: BaseException) -> bool:
    """`error` (or what it wraps) is a failed connection: requests' ConnectionError and
    Timeout, or the socket errors beneath them."""
    import socket

    import requests

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(
            error,
            requests.exceptions.ConnectionError
            | requests.exceptions.Timeout
            | socket.gaierror
            | ConnectionError
            | TimeoutError,
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


# "No space left on device", "Disk quota exceeded": a build that ran out of room.
_DISK_FULL = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded"}


def _unwritable(
    error: OSError | RuntimeError, builder: tfds.core.DatasetBuilder, cfg: ml_collections.ConfigDict
) -> DatasetReadError | None:
    """What a failed `download_and_prepare` raises instead of `error`: a `DatasetReadError`
    naming data_dir and the fix when the disk is full or cannot be written; else None.

    TFDS re-raises a failed write with its own prefix (`Failed to finalize writing of split
    ...`), as a RuntimeError or an OSError without errno, raised from the original error:
    the chain of causes is looked at.
    TFDS removes the half-written build itself (its `incomplete.*` folder) when it fails;
    one a killed build left is removed by the next build (`_remove_stale_builds`)."""
    chain = list(_chain(error))
    codes = {e.errno for e in chain if isinstance(e, OSError)}
    text = " ".join(str(e) for e in chain)
    if codes & set(_DISK_FULL) or any(reason in text for reason in _DISK_FULL.values()):
        return DatasetReadError(
            f"building the {cfg.name} dataset in data.data_dir={cfg.data_dir} failed: the disk "
            f"is full ({first_line(error)}). Free space there, or point data.data_dir at a disk "
            "with room (--config.data.data_dir=DIR), and run again (the partial build was "
            "removed)."
        )
    if codes & set(locks.READ_ONLY_ERRNOS):
        return DatasetReadError(
            f"data.data_dir={cfg.data_dir} cannot be written ({first_line(error)}) and "
            f"holds no {cfg.name} build for this config ({builder.data_path}): point "
            "data.data_dir at a writable directory (--config.data.data_dir=DIR), or build "
            "the dataset there once where it can be written."
        )
    return None


def _chain(error: BaseException | None) -> Iterator[BaseException]:
    """`error` and the exceptions it was raised from (`raise ... from`), each once."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__


def _check_complete(builder: fra_eng.FraEng, cfg: ml_collections.ConfigDict) -> None:
    """Refuses a fra_eng build on disk whose info does not list all its splits
    (dataset_info.json deleted or emptied): TFDS takes the folder for a finished build, and
    its first read would fail, or (a split left out) say the split does not exist."""
    names = set(builder.info.splits.keys())
    missing = sorted(set(config_lib.FRA_ENG_SPLITS) - names)
    if missing:
        reason = f"splits {missing} not listed" if names else "no splits listed"
        raise _damaged(builder.data_path, cfg, _NO_INFO, ValueError(reason))


def _check_same_zip(builder: fra_eng.FraEng, cfg: ml_collections.ConfigDict) -> None:
    """Refuses a dataset built from a different zip than the configured one (stale build).

    A configured zip that is not there is not needed to read a finished build: it is used,
    with a warning naming the zip (a fresh build refuses it: `download.locate_zip`)."""
    if not (builder.is_prepared() and cfg.zip_path):
        return
    built_from = builder.info.metadata.get("zip_sha256")
    if not Path(cfg.zip_path).expanduser().is_file():
        logging.warning(
            "data.zip_path=%s is not a file; reading the %s dataset already built in %s "
            "(from a zip with sha256 %s) without it.",
            cfg.zip_path,
            cfg.name,
            builder.data_path,
            built_from or "unknown",
        )
        return
    current = download.file_digests(Path(cfg.zip_path).expanduser())["sha256"]
    if built_from and built_from != current:
        raise DatasetReadError(
            f"the fra_eng dataset in {builder.data_path} was built from a zip with sha256 "
            f"{built_from}, but data.zip_path={cfg.zip_path} has sha256 {current}. Delete "
            f"{builder.data_path} to rebuild, or use another data.data_dir "
            "(--config.data.data_dir=DIR)."
        )


def download_manual_dir(cfg: ml_collections.ConfigDict) -> Path:
    """TFDS's default manual dir for our data_dir: `<data_dir>/downloads/manual`."""
    return Path(cfg.data_dir) / "downloads" / "manual"


def _text(value) -> str:
    # array_record stores Text as bytes; tfds.testing.mock_data yields str.
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _read_fra_eng(
    builder: tfds.core.DatasetBuilder,
    cfg: ml_collections.ConfigDict,
    split: str,
    keys: tuple[str, str],
):
    """Fast path for our own builder: raw records parsed with protobuf directly.

    TFDS's generic numpy decoding costs ~70 us per example (11 s for the train split); parsing
    the `tf.train.Example` bytes ourselves takes ~2 s for all of it.
    """
    source, size = _data_source(builder, cfg, split, deserialize_method=_RAW)
    indices = list(range(size))
    with _reading(builder, cfg, split):
        records = source.__getitems__(indices)
        pairs = []
        for record in records:
            feature = tf_example_pb2.Example.FromString(record).features.feature
            pairs.append(tuple(feature[key].bytes_list.value[0].decode("utf-8") for key in keys))
    return pairs


def load_split_pairs(cfg: ml_collections.ConfigDict, split: str) -> list[tuple[str, str]]:
    """All (source, target) pairs of `split` (TFDS split syntax, e.g. "full[:600]"), in stored
    order. fra_eng is stored preprocessed; other datasets get `cfg.book_preprocessing`.
    """
    builder = prepared_builder(cfg)
    keys = (cfg.source_lang, cfg.target_lang)
    if cfg.name == config_lib.FRA_ENG:
        return _read_fra_eng(builder, cfg, split, keys)
    source, size = _data_source(builder, cfg, split)
    pairs = []
    with _reading(builder, cfg, split):
        # One record at a time: tfds.testing.mock_data's patched source breaks `__getitems__`.
        for i in range(size):
            record = source[i]
            src, tgt = (_text(record[key]) for key in keys)
            pairs.append(preprocessing.preprocess_pair(src, tgt, book_style=cfg.book_preprocessing))
    return pairs


def spread_subset(items: Sequence[T], n: int) -> list[T]:
    """n items evenly spaced over `items` (all of them if n is 0 or >= len), order kept.

    fra-eng's file, and so every split in stored order, runs from the shortest sentences to
    the longest: its first n pairs are the n shortest. An evenly spaced subset has the
    split's length distribution, and is the same every time (no seed involved).
    """
    if n < 0:
        raise ValueError(f"subset size must be >= 0, got {n}.")
    if not n or n >= len(items):
        return list(items)
    picks = np.unique(np.linspace(0, len(items) - 1, n).round().astype(np.int64))
    return [items[i] for i in picks]


def split_sizes(cfg: ml_collections.ConfigDict) -> dict[str, int]:
    """Number of examples in every split of the dataset, from its TFDS info."""
    builder = prepared_builder(cfg)
    return {name: info.num_examples for name, info in builder.info.splits.items()}
