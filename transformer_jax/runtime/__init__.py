"""Process tuning: the run config's settings that change JAX or the C library for the process.

Importing `transformer_jax` (or any subpackage, this one included) changes nothing in JAX,
XLA or the allocator (tests/test_runtime.py checks it in a fresh process). A launcher, the
notebook or a benchmark calls `configure_process(config)` first thing, with its run config;
`train_and_evaluate` calls it too (a second call changes nothing that is set).

One module per knob, each a run-config key (defaults in `training/config.py`):

- `xla_flags` (default ""): XLA flags appended to `XLA_FLAGS`. XLA reads them once, when
  JAX creates its first backend; later calls only warn. Flag names are per backend; the
  `d2l` config sets an XLA:CPU one.
- `host_memory` (default "auto" = "reuse" on CPU, "system" on GPU/TPU): with "reuse" glibc
  keeps freed host memory mapped (`mallopt`), so XLA:CPU's per-step temporaries cost no
  page faults; "system" keeps glibc's defaults. Fixed once JAX's threads exist; where the C
  library is not glibc nothing is set.
- `threefry_lowering` (default "auto" = "unrolled"): JAX's CPU lowering of the Threefry
  hash without a loop, so dropout masks fuse with it. Only the CPU lowering is registered:
  GPU and TPU already lower it unrolled. Takes effect for functions traced afterwards.

A decoding process may also split its batches over several CPU devices: `cpu_devices`, a
flag of the translate and evaluate launchers (not a run-config key: training keeps one).

Each knob's "auto" (the defaults) resolves per platform (`backend`: the table of what each
means on CPU, GPU and TPU), to the value measured to help there (benchmarks/README.md,
"Numbers behind the runtime knobs"); so does the train step's `gradients` rule.
"""

from __future__ import annotations

import ml_collections

from transformer_jax.runtime import backend, cpu_devices, host_memory, threefry, xla_flags


def configure_process(config: ml_collections.ConfigDict) -> None:
    """Applies the run config's `xla_flags`, `host_memory` and `threefry_lowering`.

    Call it before anything computes: XLA flags and the allocator are fixed once JAX
    creates its backend (later calls only log or warn, see `xla_flags.apply`,
    `host_memory.apply`). Starts no backend itself. Raises ValueError on a bad value,
    before anything is changed.
    """
    flags = config.get("xla_flags", "")
    memory = config.get("host_memory", "auto")
    lowering = config.get("threefry_lowering", "auto")
    check(flags, memory, lowering)
    xla_flags.apply(flags)
    host_memory.apply(memory)
    threefry.apply(lowering)


def check(flags: str, memory: str, lowering: str) -> None:
    """Raises ValueError naming the bad value and the choices; changes nothing."""
    xla_flags.parse(flags)
    host_memory.check_mode(memory)
    threefry.check(lowering)


__all__ = [
    "backend",
    "check",
    "configure_process",
    "cpu_devices",
    "host_memory",
    "threefry",
    "xla_flags",
]
