"""A launcher's `--help`: its docstring and the project's flags, exit code 0.

absl's own help flags print only the flags of `__main__`, which is absl's app module (no
flags) under a console command, and exit 1. `launch.flags_parser` asks `help_asked` first
and prints `launcher_help` instead, whether the launcher runs as `python -m` or as an
installed console command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Literal

from absl import flags

# absl's own help flags, which `launch.flags_parser` answers instead of absl.
SHORT_HELP = ("--help", "-help", "-?", "--helpshort", "-helpshort")
FULL_HELP = ("--helpfull", "-helpfull")
# Flags defined by modules of these packages are a launcher's own (e.g. the decoding flags).
PROJECT_PACKAGES = ("transformer_jax", "experiments", "benchmarks", "configs")


def help_asked(args: Sequence[str]) -> Literal["short", "full"] | None:
    """ "short" or "full" if `args` ask for help (before a `--`), else None."""
    for arg in args:
        if arg == "--":
            return None
        if arg in FULL_HELP:
            return "full"
        if arg in SHORT_HELP:
            return "short"
    return None


def launcher_help(
    module: str, *, full: bool = False, flag_values: flags.FlagValues = flags.FLAGS
) -> str:
    """A launcher's `--help`: its module docstring, then its own flags and the shared ones it
    defined through the project's modules (e.g. `define_decoding_flags`), whether it runs as
    `python -m` or as an installed console command. `full` adds every other flag (absl, JAX,
    orbax, TFDS)."""
    by_module = flag_values.flags_by_module_dict()
    # A module run as `python -m` registers its flags under sys.argv[0] (absl's rule).
    own_keys = [module, sys.argv[0]] if module == "__main__" else [module]
    shared = sorted(k for k in by_module if k.partition(".")[0] in PROJECT_PACKAGES)
    ours = [k for k in dict.fromkeys([*own_keys, *shared]) if k in by_module]
    doc = (getattr(sys.modules.get(module), "__doc__", None) or "").strip("\n")
    parts = [doc or f"USAGE: {module} [flags]", "", "flags:"]
    parts += [flag_values.module_help(k) for k in ours]
    if full:
        others = sorted(k for k in by_module if k not in ours)
        parts += ["", "Flags of the libraries:"] + [flag_values.module_help(k) for k in others]
    else:
        parts += ["", "Try --helpfull for the flags of the libraries too (absl, JAX, orbax, TFDS)."]
    return "\n".join(parts)
