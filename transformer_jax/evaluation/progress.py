"""A progress bar for long decoding (translate, evaluate): tqdm on stderr, with a rate and ETA.

    with progress_bar("Translating", unit="sentence") as update:
        translator.translate_detailed(sentences, progress=update)   # update(done, total)

The bar appears only once the work has taken `DELAY_S` seconds (a few lines translate in
silence, as before) and, by default, only when its stream is a terminal: stdout stays the
translations alone, and a log file or a pipe gets no carriage-return lines. `enabled=True`
draws it anyway, `False` never.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

from tqdm import tqdm

DELAY_S = 3.0  # seconds of work before a bar is drawn


@contextlib.contextmanager
def progress_bar(
    desc: str,
    *,
    unit: str = "sentence",
    file: TextIO | None = None,
    enabled: bool | None = None,
    delay: float | None = None,
) -> Iterator[Callable[[int, int], None]]:
    """Yields `update(done, total)`, which moves the bar to `done` of `total` units.

    `file` (default sys.stderr) gets the bar; `enabled` None: only if `file` is a terminal;
    `delay`: seconds before it is drawn, default `DELAY_S`.
    """
    bar = tqdm(
        desc=desc,
        unit=unit,
        file=file or sys.stderr,
        disable=None if enabled is None else not enabled,
        delay=DELAY_S if delay is None else delay,
        dynamic_ncols=True,
    )

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        bar.close()
