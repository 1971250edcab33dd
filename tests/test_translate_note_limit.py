"""translate prints at most --max_notes notes of each kind, then one line counting the rest
(`evaluation.note_limit`): a file of 3,000 long lines gave 2,468 lines of notes."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.evaluation import note_limit
from transformer_jax.inference.notes import cut_note, long_note, unknown_note


def _notes(count: int) -> list[str]:
    """`count` inputs, each over the trained length and cut: two notes of two kinds each."""
    return [
        note
        for number in range(1, count + 1)
        for note in (long_note(number, 60 + number, False, 24), cut_note(number, 96))
    ]


def test_the_first_notes_of_each_kind_then_one_line_a_kind_counting_the_rest():
    stream = io.StringIO()
    with note_limit.limited(2, stream):
        note_limit.emit(_notes(3), stream)  # as a stream's first chunk...
        note_limit.emit(_notes(1200)[6:], stream)  # ...and the rest (numbers go on)
    lines = stream.getvalue().splitlines()
    assert lines[:4] == _notes(2)  # sentences 1 and 2: both kinds, in their order
    assert lines[4:] == [
        'note: 1,198 more notes like "sentence 2 has 62 tokens, more than the longest the '
        'model was trained on…" were left out (--max_notes=0 prints every note).',
        "note: 1,198 more notes like \"sentence 2's translation was cut at 96 tokens, the most "
        'its length allow…" were left out (--max_notes=0 prints every note).',
    ]


def test_notes_listing_other_words_are_one_kind():
    words = [["xyz"], ["l'homme", "qq"], list("abcdefg")]  # 7 words: "... and 2 more"
    notes = [unknown_note(number, listed) for number, listed in enumerate(words * 3, 1)]
    stream = io.StringIO()
    with note_limit.limited(2, stream):
        note_limit.emit(notes, stream)
    lines = stream.getvalue().splitlines()
    assert lines[:2] == notes[:2] and len(lines) == 3, lines
    assert lines[2].startswith("note: 7 more notes like \"sentence 2 has \"l'homme\", 'qq',")


@pytest.mark.parametrize("inside", [True, False])
def test_no_limit_or_outside_one_every_note_is_printed(inside):
    stream = io.StringIO()
    if inside:
        with note_limit.limited(0, stream):
            note_limit.emit(_notes(30), stream)
    else:  # a library caller (translate_workdir, ...) gets every note
        note_limit.emit(_notes(30), stream)
    assert stream.getvalue().splitlines() == _notes(30)


def test_under_the_limit_no_count_line():
    stream = io.StringIO()
    with note_limit.limited(10, stream):
        note_limit.emit(_notes(10), stream)
    assert stream.getvalue().splitlines() == _notes(10)


@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_the_translate_command_keeps_to_max_notes(tiny_workdir, tmp_path):
    source = tmp_path / "long.txt"  # 6 lines over the tiny run's 24 trained tokens
    source.write_text("".join(f"{'go ' * 40}{i}\n" for i in range(6)), "utf-8")

    def notes(max_notes: int) -> list[str]:
        command = [sys.executable, "-m", "experiments.translate", f"--workdir={tiny_workdir}",
                   f"--input_file={source}", f"--max_notes={max_notes}"]  # fmt: skip
        result = subprocess.run(
            command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(result.stdout.splitlines()) == 6  # every line translated
        return [line for line in result.stderr.splitlines() if line.startswith("note:")]

    every, limited = notes(0), notes(2)
    kinds: dict[str, list[str]] = {}
    for note in every:
        kinds.setdefault(re.sub(r"\d[\d,]*", "N", note), []).append(note)
    assert any(len(same) > 2 for same in kinds.values()), every  # the limit has work to do
    expected = []
    for same in kinds.values():  # each kind: its first two, in the order printed
        expected += same[:2]
    counts = [line for line in limited if " more notes like " in line]
    assert [line for line in limited if line not in counts] == [
        note for note in every if note in expected
    ]
    assert sorted(int(line.split()[1]) for line in counts) == sorted(
        len(same) - 2 for same in kinds.values() if len(same) > 2
    )
