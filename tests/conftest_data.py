"""Fixtures for the data tests; test modules load them with `pytest_plugins`.

Helpers are exposed as fixtures (`make_zip`, `make_cfg`, `synthetic_lines`) rather than
imported, so that pytest imports this module only as a plugin (and can rewrite its asserts).

Most tests use tiny generated zips laid out like the d2l archive. The real corpus
(`../shared/data/fra-eng.zip`) is built at most once per session, in a temporary directory.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
import tensorflow_datasets as tfds

from transformer_jax.data import config as config_lib

tfds.disable_progress_bar()

REAL_ZIP = config_lib.SHARED_ZIP


def _write_corpus_zip(path: Path, lines: list[bytes] | list[str], *, macosx: bool = True) -> Path:
    """A zip shaped like d2l's: `fra-eng/fra.txt`, `fra-eng/_about.txt`, `__MACOSX/` junk."""
    raw = b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines) + b"\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("fra-eng/fra.txt", raw)
        archive.writestr("fra-eng/_about.txt", "about")
        if macosx:
            archive.writestr("__MACOSX/fra-eng/._fra.txt", b"\x00\x05\x16\x07junk")
    return path


def _synthetic_lines(num_sources: int = 60, translations: int = 3) -> list[str]:
    """`num_sources` English sentences, each with several French translations (like Tatoeba)."""
    words = ["go", "run", "stop", "wait", "help", "eat", "sing", "read", "swim", "walk", "sleep"]
    lines = []
    for i in range(num_sources):
        english = " ".join(words[(i + k) % len(words)] for k in range(1 + i % 6)).capitalize()
        for t in range(translations):
            french = f"Mot{t} " + " ".join(f"fr{(i * 7 + k) % 23}" for k in range(1 + (i + t) % 7))
            lines.append(f"{english}{'.!?'[i % 3]}\t{french} !")
    return lines


def _small_config(tmp_path: Path, zip_path: Path, **overrides) -> object:
    """A data config on a small zip, building into `tmp_path/tfds`, never downloading."""
    cfg = config_lib.data_config()
    cfg.zip_path = str(zip_path)
    cfg.url = ""
    cfg.data_dir = str(tmp_path / "tfds")
    cfg.tokenizer = "word"
    cfg.min_freq = 1
    cfg.batch_size = 8
    cfg.max_src_len = 10
    cfg.max_tgt_len = 10
    cfg.validation_fraction = 0.2
    cfg.test_fraction = 0.2
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


@pytest.fixture
def make_zip():
    """`make_zip(path, lines, macosx=True)` writes a d2l-shaped zip."""
    return _write_corpus_zip


@pytest.fixture
def synthetic_lines():
    """`synthetic_lines(num_sources=60, translations=3)`: Tatoeba-like tab-separated lines."""
    return _synthetic_lines


@pytest.fixture
def make_cfg(tmp_path):
    """`make_cfg(zip_path, **overrides)`: small word-level config building in tmp_path."""
    return lambda zip_path, **overrides: _small_config(tmp_path, zip_path, **overrides)


@pytest.fixture
def small_zip(tmp_path) -> Path:
    """60 English sentences x 3 French translations = 180 pairs."""
    return _write_corpus_zip(tmp_path / "fra-eng.zip", _synthetic_lines())


@pytest.fixture(scope="session")
def real_cfg(tmp_path_factory):
    """Data config on the real corpus, built once per test run (~15-30 s) in a temp dir.

    Under pytest-xdist the directory is shared by the run's workers (the parent of each
    worker's base temp): `datasets.prepared_builder` builds under a file lock, so the first
    worker builds each variant and the others wait and read it, as runs sharing a data_dir do.
    """
    if not REAL_ZIP.is_file():
        pytest.skip(f"real corpus not found at {REAL_ZIP}; put fra-eng.zip there to run this test")
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # .../pytest-N, this run's; each worker's own is .../pytest-N/popen-gwK
    cfg = config_lib.data_config()
    cfg.zip_path = str(REAL_ZIP)
    cfg.url = ""
    cfg.data_dir = str(root / "real_corpus" / "tfds")
    return cfg


@pytest.fixture(scope="session")
def real_builder(real_cfg):
    from transformer_jax.data import datasets

    return datasets.prepared_builder(real_cfg)
