"""Unrolled Threefry on CPU: the same random bits, without a while loop per draw.

JAX lowers the Threefry-2x32 hash with a *rolled* 5-iteration `fori_loop` on CPU (to save
compile time) and unrolled everywhere else. In a train step every dropout draw and every
flax `make_rng` fold-in then becomes an XLA while loop whose body writes the full-size
uint32 state to memory each round, and nothing can fuse with it. Measured on the `small`
benchmark (3+3 layers, D 256, batch 64×32, bf16): 32 while loops, ~2,800 buffer copies
and ~40 % of the step time went to dropout masks; unrolled, the hash fuses into the mask
and the step took 907 ms instead of 1,591 ms (d2l: 27 ms instead of 37 ms).

`enable()` registers JAX's own unrolled lowering for the CPU platform. The algorithm and
hence every random number is unchanged (tests/test_ops_fast_rng.py compares the bits);
only the loop structure differs. The price is compile time (small: 26 s instead of 16 s).
It is enabled when `transformer_jax` is imported unless the environment sets
`TRANSFORMER_JAX_ROLLED_THREEFRY=1`; `disable()` restores JAX's default.
"""

from __future__ import annotations

import logging
import os

try:  # private JAX modules: pinned in requirements.txt, guarded in case they move
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32
except ImportError:  # pragma: no cover
    mlir = threefry2x32 = None

ENV_OPT_OUT = "TRANSFORMER_JAX_ROLLED_THREEFRY"


def available() -> bool:
    """Whether this JAX exposes the two lowering rules `enable` and `disable` swap."""
    return threefry2x32 is not None and all(
        hasattr(threefry2x32, name)
        for name in (
            "threefry2x32_p",
            "_threefry2x32_lowering_rule",
            "_threefry2x32_cpu_lowering_rule",
        )
    )


def enable() -> None:
    """Lower Threefry on CPU with the unrolled rounds (affects functions traced after)."""
    if not available():
        logging.warning("transformer_jax: this JAX has no unrolled Threefry rule; keeping its own.")
        return
    mlir.register_lowering(
        threefry2x32.threefry2x32_p, threefry2x32._threefry2x32_lowering_rule, platform="cpu"
    )


def disable() -> None:
    """Restore JAX's rolled-loop CPU lowering."""
    if not available():
        return
    mlir.register_lowering(
        threefry2x32.threefry2x32_p, threefry2x32._threefry2x32_cpu_lowering_rule, platform="cpu"
    )


def enable_unless_opted_out() -> None:
    if os.environ.get(ENV_OPT_OUT, "") not in ("1", "true", "True"):
        enable()
