"""`--compilation_cache_dir`: JAX's persistent compilation cache, for every launcher that compiles.

A launcher's programs (the train and eval steps, the decoders a translation or a server
warms) take seconds to compile on a CPU and tens of seconds on a GPU. Written to a directory
on disk, they are read back by the next process that builds the same program on the same
machine and software: a resumed run, a second run of a config, `evaluate` after training,
each `translate` command, a restarted server. JAX keeps a program only if it took at least
`jax_persistent_cache_min_compile_time_secs` (1 s by default) to compile, so the cache holds
the few large programs, not the many small ones.

`JAX_COMPILATION_CACHE_DIR` in the environment wins over the flag (the tests point every
process at one cache that way).
"""

from __future__ import annotations

import errno
import os
import sys

from absl import flags

# --help lists the flag under the module launchers import (`transformer_jax.launch`).
HELP_MODULE = "transformer_jax.launch"
DEFAULT_COMPILATION_CACHE_DIR = "~/.cache/transformer_jax/xla"


def define_compilation_cache_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines `--compilation_cache_dir` (default `DEFAULT_COMPILATION_CACHE_DIR`; '' = off)."""
    flags.DEFINE_string(
        "compilation_cache_dir",
        DEFAULT_COMPILATION_CACHE_DIR,
        "Persistent XLA compilation cache: a program compiled once on this machine is read "
        "back by the next command that builds it (a resumed run, evaluate, translate, a "
        "restarted server); '' = off.",
        flag_values=flag_values,
        module_name=HELP_MODULE,
    )


def use_compilation_cache(directory: str | None) -> bool:
    """Points JAX's persistent compilation cache at `directory` (`~` expanded, created if
    missing), unless it is empty or JAX already has one (`JAX_COMPILATION_CACHE_DIR`); returns
    whether this call set it. A directory that cannot be created or written is one note on
    stderr and no cache: the command still runs, compiling as it would without one (JAX
    itself would warn at every program). Call it before the process compiles anything: JAX
    settles whether it has a cache at its first compilation."""
    import jax  # here, not at import: a launcher's --help and flag errors stay JAX-free

    if not directory or jax.config.jax_compilation_cache_dir:
        return False
    path = os.path.expanduser(directory)
    try:
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"[Errno {errno.EACCES}] not writable: {path!r}")
    except OSError as error:
        print(
            f"note: --compilation_cache_dir={directory} cannot be used ({error}): compiling "
            "without a persistent cache; give a writable directory, or '' to turn it off.",
            file=sys.stderr,
        )
        return False
    jax.config.update("jax_compilation_cache_dir", path)
    return True
