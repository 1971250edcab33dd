"""Renamed flags: a flag's old name still works for one release, with a one-line note.

`launch.flags_parser` rewrites each old name in argv to its new one before absl parses,
so a launcher defines only the new flag.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from absl import flags

# Renamed flags, old name -> new: the old one still works for one release, with a note.
# "split" names dataset splits only; cutting inputs at sentence ends is segmenting
# (data/segmenting.py).
RENAMED_FLAGS = {"split_len": "segment_len", "split_lens": "segment_lens"}


def rename_deprecated_flags(
    argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS
) -> list[str]:
    """`argv` with each old flag name (`RENAMED_FLAGS`) written as its new one, which the
    launcher defines, and a one-line note on stderr for each; nothing after a `--`."""
    out = list(argv[:1])
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "--":
            return out + list(argv[i:])
        dashes = "--" if arg.startswith("--") else "-" if arg.startswith("-") else ""
        name, eq, value = arg[len(dashes) :].partition("=")
        new = RENAMED_FLAGS.get(name)
        if dashes and new is not None and new in flag_values:
            print(f"note: --{name} is deprecated; use --{new} (the same setting).", file=sys.stderr)
            arg = f"{dashes}{new}{eq}{value}"
        out.append(arg)
    return out
