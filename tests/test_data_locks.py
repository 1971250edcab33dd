"""Runs that share a data_dir: one process builds the dataset (or trains SentencePiece), the
others wait and reuse it (`data/locks.py`)."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.data import datasets, fra_eng, locks, tokenizers
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer

pytest_plugins = ["tests.conftest_data"]


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_second_process_waits_for_the_lock_then_takes_it(tmp_path):
    lock = tmp_path / "sub" / "x.lock"
    with locks.exclusive(lock):
        other = _python(
            f"""
            from absl import logging
            from transformer_jax.data import locks
            logging.set_verbosity(logging.INFO)
            with locks.exclusive({str(lock)!r}, what="the test"):
                print("acquired", flush=True)
            """
        )
        time.sleep(3.0)  # the other process has started and tried by now
        assert other.poll() is None, other.communicate()[0]  # still waiting
    output, _ = other.communicate(timeout=60)
    assert other.returncode == 0 and "acquired" in output, output
    assert "Waiting for another process to finish the test" in output


def test_two_processes_building_one_dataset_at_once_both_succeed(
    tmp_path, make_zip, synthetic_lines
):
    zip_path = make_zip(tmp_path / "corpus.zip", synthetic_lines(400, 3))
    code = f"""
        from tests.conftest_data import _small_config
        from pathlib import Path
        from transformer_jax.data import datasets
        cfg = _small_config(Path({str(tmp_path)!r}), Path({str(zip_path)!r}))
        builder = datasets.prepared_builder(cfg)
        print("examples", builder.info.splits["full"].num_examples, flush=True)
        """
    first, second = _python(code), _python(code)
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, "\n".join(o[-3000:] for o in outputs)
    assert all("examples 1200" in o for o in outputs), outputs
    built = sorted(p.name for p in (tmp_path / "tfds" / "fra_eng").glob("val*/*"))
    assert built == ["1.0.0"], built  # one build, no `incomplete.*` leftovers


def _read_only(*paths):
    """An `open` that fails with EROFS, as on a read-only mount, for files under `paths`."""

    def fake_open(file, *args, **kwargs):
        if any(str(file).startswith(str(p)) for p in paths):
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return open(file, *args, **kwargs)

    return fake_open


def test_a_read_only_data_dir_reads_its_builds_and_caches_without_locks(
    tmp_path, monkeypatch, make_cfg, small_zip, caplog
):
    """A shared, read-only data_dir (built once elsewhere): its dataset and cached tokenizers
    are read without lock files; a tokenizer it lacks is trained and used uncached; a build
    it lacks is one DatasetReadError saying to point data.data_dir at a writable directory."""
    cfg = make_cfg(small_zip, tokenizer="sentencepiece", vocab_size=40)
    pairs = datasets.load_split_pairs(cfg, "train")
    cached = tokenizers.build_tokenizers(cfg, pairs, Path(cfg.data_dir) / "tokenizers")
    for lock in Path(cfg.data_dir).rglob(".*lock"):
        lock.unlink()  # as if built on another machine and mounted read-only here
    monkeypatch.setattr(locks, "open", _read_only(cfg.data_dir), raising=False)
    fake_save = _read_only(cfg.data_dir)

    def read_only_save(tokenizer, directory):
        fake_save(Path(directory) / "spm.model", "wb")

    monkeypatch.setattr(SentencePieceTokenizer, "save", read_only_save)
    assert datasets.load_split_pairs(cfg, "train") == pairs
    again = tokenizers.build_tokenizers(cfg, pairs, Path(cfg.data_dir) / "tokenizers")
    assert [t.fingerprint for t in again] == [t.fingerprint for t in cached]
    assert not list(Path(cfg.data_dir).rglob(".*lock"))
    other = tokenizers.build_tokenizers(cfg, pairs[:-1], Path(cfg.data_dir) / "tokenizers")
    assert other[0].vocab_size == 40 and "Cannot cache the SentencePiece model" in caplog.text

    def read_only_build(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self.data_path))

    monkeypatch.setattr(fra_eng.FraEng, "download_and_prepare", read_only_build)
    cfg.split_seed = 1  # a build this data_dir does not hold
    with pytest.raises(datasets.DatasetReadError, match="cannot be written .* writable directory"):
        datasets.load_split_pairs(cfg, "train")


def test_other_failures_to_create_a_lock_still_raise(tmp_path, monkeypatch):
    def full_disk(file, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(file))

    monkeypatch.setattr(locks, "open", full_disk, raising=False)
    with pytest.raises(OSError, match="No space left"), locks.exclusive(tmp_path / "x.lock"):
        pass
