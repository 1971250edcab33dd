"""How many XLA:CPU devices a decoding process splits its batches over (`--cpu_devices`).

JAX gives the CPU backend one device, whose programs run their ops one after another and
spread only the large ones (matmuls) over the cores. Decoding is a loop of small steps, so
the cores idle through its elementwise work, top-k and cache updates. With N CPU devices
`decoding.decode_ids` splits each batch over them (`decoding.sharded.sharded_decoder`, no
collectives) and N step loops run side by side, each on its own rows; the tokens are the
same (tested). On 2 AMD EPYC cores, 2 devices decoded the random `small` model's 64
sentences 10-14 % faster with greedy and with beam 4 (benchmarks/README.md); a model as
tiny as the book's (`d2l`), whose steps are dispatch-bound, decoded greedy twice as slowly
over 3 devices (9 -> 19 ms for 12 sentences), so it stays a switch.

The translate and evaluate launchers take `--cpu_devices` (default 0: JAX's own single
device, as training runs); the server's default is `local_cores()`, one device per core
(small batches still decode on one: `decoding.batch_decode`, "Devices"). It must be set
before JAX computes anything in the process, so `apply` raises once a backend exists
instead of silently doing nothing. Only the CPU backend reads it: on a GPU or TPU host the
accelerators stay the devices.
"""

from __future__ import annotations

import os

from transformer_jax.runtime.xla_flags import backends_initialized


def local_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def check(count: int) -> None:
    """Raises ValueError unless `count` is an int >= 0 (0 = JAX's default)."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(
            f"cpu_devices={count!r}: use a whole number >= 1 (e.g. the number of cores), "
            "or 0 for JAX's default of one CPU device."
        )


def apply(count: int) -> None:
    """Give the CPU backend `count` devices (0: leave JAX's default); before any computation."""
    check(count)
    if count == 0:
        return
    import jax  # here, not at import time: importing the package changes nothing in JAX

    if backends_initialized():
        if jax.config.jax_num_cpu_devices == count:
            return  # already so (a second call)
        raise ValueError(
            f"cpu_devices={count} cannot take effect: JAX has already started its backend "
            "in this process. Set it first thing, before anything computes."
        )
    jax.config.update("jax_num_cpu_devices", count)
