"""A run config's process-wide settings, which must be made before JAX starts its backend."""

from __future__ import annotations

import ml_collections

from transformer_jax.training import host_memory, xla_flags


def configure_process(config: ml_collections.ConfigDict) -> None:
    """Applies `config.xla_flags` and `config.host_memory` to this process.

    Call it first thing in a launcher: both are fixed once JAX creates its backend (XLA
    reads its flags once; XLA:CPU's threads keep their allocator arenas). Later calls only
    log or warn (see `xla_flags.apply`, `host_memory.apply`). Raises ValueError on a bad
    value, before anything runs.
    """
    xla_flags.apply(config.get("xla_flags", ""))
    host_memory.apply(config.get("host_memory", "reuse"))
