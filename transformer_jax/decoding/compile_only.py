"""Compile the programs a decoding call would run, without running them.

    with compile_only.compiling():
        translator.translate(sentences)   # compiles each program the call needs; decodes nothing

On an accelerator a decoding program costs seconds to compile (an H200 compiled the README
report's two beam-search programs in 22 s) and milliseconds to run, and which programs a call
needs (batch rows, program widths, devices) follows from its sentences (`batch_decode`). So
the surest way to compile them ahead, in a background thread while training runs
(`training.precompile`), is to make that very call with the decoders switched to compiling:
inside `compiling()`, each jitted decoder (`model_decode.sharded_decoder`,
`sharded_nbest_decoder`) lowers and compiles for its arguments, which fills the jitted
function's own cache (a later call with the same shapes and shardings compiles nothing), and
returns zeros of its output's shape instead of running: the caller's "translations" are
empty. The switch is a context variable, so it holds in the thread that set it only: decoding
in other threads (the training loop's evaluators) runs as usual.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

_COMPILING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "decode_compile_only", default=False
)


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Within the block (this thread only), decoders compile and return zeros (module doc)."""
    token = _COMPILING.set(True)
    try:
        yield
    finally:
        _COMPILING.reset(token)


def active() -> bool:
    """True inside `compiling()` in this thread."""
    return _COMPILING.get()


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, or inside `compiling()`: compile `fn` (a jitted function) for `args`
    and return host zeros shaped as its output (the same tree)."""
    if not _COMPILING.get():
        return fn(*args)
    compiled = fn.lower(*args).compile()
    return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), compiled.out_info)
