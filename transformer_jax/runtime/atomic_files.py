"""Text files written whole or not at all: beside their place, then renamed into it.

    write_text_atomically(Path("runs/x/config.json"), text)
    write_texts_together({json_path: json_text, md_path: markdown})

A write that fails (a full disk) or is killed leaves the old file, or none, never a part
of one; the temporary is removed. Its name is unique to the writer (process id and a
random suffix), so two processes writing the same file never share it. Always UTF-8,
whatever the locale: the project's text files hold "É", "œ", "±".
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path


def write_text_atomically(path: str | Path, text: str) -> None:
    """`Path(path).write_text(text, encoding="utf-8")`, whole or not at all."""
    write_texts_together({Path(path): text})


def write_texts_together(texts: Mapping[Path, str]) -> None:
    """Each text into its path, whole or not at all; the renames come after every temporary
    is whole, so a failed write leaves none of the new files beside an old one (a report's
    JSON of one evaluation beside the Markdown of another)."""
    unique = f"{os.getpid()}.{secrets.token_hex(4)}"
    temporaries = {Path(p): Path(p).with_name(f".{Path(p).name}.{unique}.tmp") for p in texts}
    try:
        for path, text in texts.items():
            temporaries[Path(path)].write_text(text, encoding="utf-8")
        for path, temporary in temporaries.items():
            os.replace(temporary, path)
    finally:
        for temporary in temporaries.values():
            temporary.unlink(missing_ok=True)
