"""How JAX lowers the Threefry-2x32 hash on CPU (`config.threefry_lowering`).

JAX lowers Threefry with a *rolled* 5-iteration loop on CPU (to save compile time) and
unrolled everywhere else. In a train step every dropout draw and every flax `make_rng`
fold-in then becomes an XLA while loop whose body writes the full-size uint32 state to
memory each round, and nothing can fuse with it. Unrolled, the hash fuses into the dropout
mask; the step is much faster and takes longer to compile (benchmarks/README.md, "Unrolled
Threefry"). The algorithm and hence every random number is the same either way
(tests/test_runtime.py compares the bits); only the loop structure differs.

Choices: "auto" (= "unrolled": CPU is the one platform with a rolled lowering, and where
unrolled was measured faster), "unrolled", or "rolled" (JAX's own CPU lowering). The rule
is registered in JAX for the whole process through private `jax._src` modules, pinned in
requirements.txt and guarded in case they move; it affects functions traced afterwards.
Nothing happens on import: `apply` is called by `runtime.configure_process`.
"""

from __future__ import annotations

import logging

try:  # private JAX modules: pinned in requirements.txt, guarded in case they move
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32
except ImportError:  # pragma: no cover
    mlir = threefry2x32 = None

CHOICES = ("auto", "unrolled", "rolled")


def check(lowering: str) -> None:
    """Raises ValueError naming the choices unless `lowering` is one of CHOICES."""
    if lowering not in CHOICES:
        raise ValueError(
            f"threefry_lowering={lowering!r} is not one of {CHOICES}: 'auto' and 'unrolled' "
            "lower Threefry without a loop on CPU (faster steps, slower compiles), 'rolled' "
            "keeps JAX's own CPU lowering."
        )


def available() -> bool:
    """Whether this JAX exposes the two lowering rules `apply` swaps."""
    return threefry2x32 is not None and all(
        hasattr(threefry2x32, name)
        for name in (
            "threefry2x32_p",
            "_threefry2x32_lowering_rule",
            "_threefry2x32_cpu_lowering_rule",
        )
    )


def apply(lowering: str) -> bool:
    """Registers the CPU lowering for `lowering` in this process; returns whether it is in effect.

    "rolled" restores JAX's default. Affects functions traced (jitted) afterwards.
    """
    check(lowering)
    if not available():
        if lowering != "rolled":
            logging.warning(
                "threefry_lowering=%r: this JAX has no unrolled rule; kept its own.", lowering
            )
        return lowering == "rolled"
    rule = (
        threefry2x32._threefry2x32_cpu_lowering_rule
        if lowering == "rolled"
        else threefry2x32._threefry2x32_lowering_rule
    )
    mlir.register_lowering(threefry2x32.threefry2x32_p, rule, platform="cpu")
    return True
