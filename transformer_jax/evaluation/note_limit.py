"""At most N notes of each kind from one translate command; one line counts the rest.

translate notes, per input line, what the user may want to know (a sentence longer than any
the model was trained on, a translation cut by its length budget, words outside the
vocabulary). A file of long lines got one or two notes a line: 3,000 lines of 60 words
gave 2,468 lines on stderr, which bury everything else. Inside `limited(n, stream)` (the
translate launcher, `--max_notes`) the first n notes of each kind are printed, the rest
counted, and one line per kind says how many were left out when the command ends:

    with note_limit.limited(10, sys.stderr):
        ...
        note_limit.emit(notes, sys.stderr)  # both engines print their notes this way

Two notes are of one kind when they differ only in their numbers (the sentence, its
tokens) and in the quoted words they list (`inference.notes`: "has 'xyz', 'qq' and 3
more, which the model's vocabulary does not cover"). Outside `limited` every note is
printed: a library caller gets them all.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import re
from collections.abc import Iterable, Iterator
from typing import TextIO

_NUMBER = re.compile(r"\d[\d,]*")
_QUOTED = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""  # a word as repr() quotes it
_WORDS = re.compile(rf"{_QUOTED}(?:, {_QUOTED})*(?: and \d[\d,]* more)?")
_EXAMPLE_CHARS = 72


@dataclasses.dataclass
class _Limit:
    per_kind: int
    shown: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    left_out: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    last_shown: dict[str, str] = dataclasses.field(default_factory=dict)

    def admit(self, note: str) -> bool:
        kind = _NUMBER.sub("N", _WORDS.sub("W", note))
        if self.shown[kind] < self.per_kind:
            self.shown[kind] += 1
            self.last_shown[kind] = note
            return True
        self.left_out[kind] += 1
        return False

    def summary(self) -> list[str]:
        lines = []
        for kind, count in self.left_out.items():
            example = self.last_shown[kind].removeprefix("note: ")
            if len(example) > _EXAMPLE_CHARS:
                example = example[:_EXAMPLE_CHARS].rstrip() + "…"
            lines.append(
                f'note: {count:,} more notes like "{example}" were left out (--max_notes=0 '
                "prints every note)."
            )
        return lines


_current: contextvars.ContextVar[_Limit | None] = contextvars.ContextVar("note_limit", default=None)


def emit(notes: Iterable[str], stream: TextIO) -> None:
    """Prints `notes` on `stream`, each kind up to the limit `limited` set (all outside it)."""
    limit = _current.get()
    for note in notes:
        if limit is None or limit.admit(note):
            print(note, file=stream)


@contextlib.contextmanager
def limited(per_kind: int, stream: TextIO) -> Iterator[None]:
    """Within: at most `per_kind` notes of each kind (0 = no limit); at the end, one line a
    kind on `stream` counting those left out."""
    limit = _Limit(per_kind) if per_kind > 0 else None
    token = _current.set(limit)
    try:
        yield
    finally:
        _current.reset(token)
        if limit is not None:
            with contextlib.suppress(OSError):  # stderr gone: nothing left to tell
                for line in limit.summary():
                    print(line, file=stream)
