"""An export is written into a temporary sibling folder and renamed into place only when it
is whole: a failure leaves nothing at --output_dir (so the re-run does not stop at "already
exists"), and --force replaces an old export only once the new one is written."""

from __future__ import annotations

import json

import pytest

from transformer_jax.data.vocab import SPECIAL_TOKENS
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.export.staging import staged_dir
from transformer_jax.inference import Translator
from transformer_jax.testing import random_params, tiny_config


def test_staged_dir_renames_on_success_and_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "exports" / "model"
    with pytest.raises(RuntimeError, match="half-way"):
        with staged_dir(out) as tmp:
            assert tmp.parent == out.parent and tmp != out and not any(tmp.iterdir())
            (tmp / "model.bin").write_text("partial")
            raise RuntimeError("half-way")
    assert list(out.parent.iterdir()) == []  # no output folder, no temporary sibling

    with staged_dir(out) as tmp:
        (tmp / "model.bin").write_text("first")
        (tmp / "export.json").write_text("{}")  # an export: what --force may replace
        assert not out.exists()  # nothing at the destination until the block ends
    assert (out / "model.bin").read_text() == "first"
    with pytest.raises(FileExistsError, match="--force"):
        with staged_dir(out):
            pass
    with pytest.raises(RuntimeError):  # a failed --force export keeps the old one
        with staged_dir(out, force=True) as tmp:
            raise RuntimeError
    assert (out / "model.bin").read_text() == "first"
    with staged_dir(out, force=True) as tmp:
        (tmp / "other.bin").write_text("second")
    assert sorted(p.name for p in out.iterdir()) == ["other.bin"]
    assert [p.name for p in out.parent.iterdir()] == ["model"]


def test_an_output_dir_that_cannot_be_written_is_named_before_anything_is_staged(tmp_path):
    """It was the OS's error about the staging's hidden folder ('[Errno 30] Read-only file
    system: /x/.ct2.partial-7bundxs_'), raised once the export had been built."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    out = blocker / "exports" / "model"  # its nearest existing parent is a file
    with pytest.raises(ValueError) as error:
        with staged_dir(out):
            raise AssertionError("not reached: checked first")
    assert str(error.value) == (
        f"--output_dir={out} cannot be written ({blocker}: Not a directory): choose another "
        "--output_dir."
    )
    assert blocker.read_text() == "not a directory"


def test_a_failed_ctranslate2_export_leaves_nothing_and_the_rerun_works(tmp_path, monkeypatch):
    pytest.importorskip("ctranslate2")
    from transformer_jax.export import convert

    words = WordTokenizer([*SPECIAL_TOKENS, "a", "b", "c"])
    cfg = tiny_config(words.vocab_size, words.vocab_size)
    model = Translator.from_params(cfg, random_params(cfg, seed=0), words, words)
    save = WordTokenizer.save

    def broken_save(self, path):
        raise OSError("No space left on device")

    monkeypatch.setattr(WordTokenizer, "save", broken_save)  # after model.bin is written
    with pytest.raises(OSError, match="No space"):
        convert(model, tmp_path / "ct2")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(WordTokenizer, "save", save)
    convert(model, tmp_path / "ct2")
    assert json.loads((tmp_path / "ct2" / "export.json").read_text())["format"] == "ctranslate2"
    assert (tmp_path / "ct2" / "model.bin").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["ct2"]
