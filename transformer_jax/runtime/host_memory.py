"""How this process's host memory is allocated (`config.host_memory`), set before JAX starts.

XLA:CPU allocates each step's temporaries as one block from the glibc arena of the worker
thread that runs the step. glibc serves a block that large with a fresh `mmap` and returns
it with `munmap` when the step ends, so every step faults in every page again. With
"reuse" (the default), `apply` sets three glibc options with `mallopt` before JAX creates
its threads:

- one arena (`M_ARENA_MAX=1`): a thread arena falls back to `mmap` for any block larger
  than its 64 MB heap whatever the other options say; the main arena grows with `brk`;
- no `mmap` for large blocks (`M_MMAP_MAX=0`), so they come from that arena;
- no trimming of its free top (`M_TRIM_THRESHOLD` at its maximum, 2 GiB; a free top
  larger than that is still returned, so temporaries above ~2 GiB keep faulting).

Freed blocks then stay mapped and the next step reuses them with no page faults, as
accelerator runtimes reuse a preallocated pool. The costs: the process keeps its peak
host memory until it exits, and all threads share one arena's lock, which costs where a
step is thousands of tiny allocations and no large ones; so the `d2l` config says
"system", which keeps glibc's defaults (as does a long-lived process whose peak should
not stay resident). Page faults, kernel time and step times either way:
benchmarks/README.md ("Numbers behind the runtime knobs") and benchmarks/LOG.md ("host memory").

"auto" (the run config's default) is "reuse" on CPU and "system" where an accelerator
computes (`runtime.backend`): it was measured to help XLA:CPU only.

Threads keep the arena they were given, so this works only before JAX starts its backend
(like `xla_flags`): `runtime.configure_process` applies it first thing; later it only
logs. Where the C library is not glibc (macOS, musl) there is nothing to set. On GPU/TPU
only host-side allocations change (device memory has its own allocator).
"""

from __future__ import annotations

import ctypes
import logging

from transformer_jax.runtime import backend, xla_flags

MODES = ("auto", "reuse", "system")

# glibc's <malloc.h> parameter numbers for mallopt.
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_INT_MAX = 2**31 - 1

_applied: str | None = None  # the mode in effect in this process, once applied


def check_mode(mode: str) -> None:
    """Raises ValueError naming the choices unless `mode` is one of MODES."""
    if mode not in MODES:
        raise ValueError(
            f"host_memory={mode!r} is not one of {MODES}: 'reuse' keeps freed host memory "
            "for the next step (faster on CPU), 'system' returns it to the OS, 'auto' picks "
            "'reuse' on CPU and 'system' on GPU/TPU."
        )


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)  # the C library this process already uses
    except (OSError, TypeError):  # pragma: no cover - e.g. Windows
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def apply(mode: str) -> bool:
    """Sets the allocator for `mode` in this process; returns whether `mode` is in effect.

    "auto" is first resolved for the platform JAX will compute on (`backend.HOST_MEMORY`).
    Idempotent. "system" is always in effect unless "reuse" was applied before. "reuse"
    is in effect only if applied before JAX's backend started, on glibc.
    """
    global _applied
    check_mode(mode)
    mode = backend.resolve(backend.HOST_MEMORY, mode)
    if _applied is not None or mode == "system":
        return _applied in (None, mode)
    libc = _glibc()
    if libc is None:
        logging.info("host_memory=%r: not glibc, nothing to set.", mode)
        return False
    if xla_flags.backends_initialized():
        # Speed only, never correctness: an info, not a warning (notebooks start JAX first).
        logging.info(
            "host_memory=%r not applied: JAX's backend already started in this process "
            "(its threads keep their glibc arenas).",
            mode,
        )
        return False
    ok = all(
        libc.mallopt(option, value) == 1
        for option, value in (
            (_M_ARENA_MAX, 1),
            (_M_MMAP_MAX, 0),
            (_M_TRIM_THRESHOLD, _INT_MAX),
        )
    )
    if ok:
        _applied = mode
        logging.info("host_memory=%r: glibc keeps freed memory for reuse.", mode)
    else:  # pragma: no cover - glibc accepts all three since 2.10
        logging.warning("host_memory=%r: glibc refused an option; left as it was.", mode)
    return ok


def in_effect() -> str:
    """The mode this process runs with: "reuse" once applied, else "system"."""
    return _applied or "system"
