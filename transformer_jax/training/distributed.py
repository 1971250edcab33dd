"""Multi-process (multi-host) start-up: one call before anything else touches JAX devices."""

from __future__ import annotations

import jax
from absl import logging


def initialize(coordinator_address: str, num_processes: int, process_id: int) -> None:
    """`jax.distributed.initialize` when a coordinator is given; a no-op otherwise.

    On CPU the cross-process collectives need gloo. Each process then sees all devices in
    `jax.devices()` and its own in `jax.local_devices()`, and reads its own data shard.
    """
    if not coordinator_address:
        return
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id} must be in [0, num_processes={num_processes}).")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
    )
    logging.info(
        "Process %d/%d: %d local of %d devices",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )
