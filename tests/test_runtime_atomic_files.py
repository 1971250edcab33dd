"""Text files written whole or not at all (runtime/atomic_files.py): config.json, the
truecaser table, sweep records, a rewritten metrics.jsonl and an evaluation's two reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_jax.runtime import atomic_files


def test_a_text_is_written_whole_as_utf8(tmp_path, monkeypatch):
    monkeypatch.setenv("LC_ALL", "C")  # the locale never chooses the encoding
    path = tmp_path / "table.json"
    atomic_files.write_text_atomically(path, "États-Unis ± œ\n")
    assert path.read_bytes() == "États-Unis ± œ\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.json"]


def test_a_failed_write_leaves_the_old_files_and_no_temporary(tmp_path, monkeypatch):
    first, second = tmp_path / "a.json", tmp_path / "a.md"
    atomic_files.write_texts_together({first: "old json", second: "old md"})
    real = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        if self.name.startswith(".a.md"):
            raise OSError(28, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_files.write_texts_together({first: "new json", second: "new md"})
    # The JSON's temporary was whole, but nothing was renamed: the pair stays the old one.
    assert (first.read_text(), second.read_text()) == ("old json", "old md")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.md"]
