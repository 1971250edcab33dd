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

`compile_concurrently(calls, threads)` makes several such calls at once, each in a worker
thread of its own under `compiling()`: XLA compiles outside Python's GIL, so the programs of
a server's warm-up (one per batch shape) compile in parallel, one per host core, instead of one
after another (benchmarks/README.md, "Server warm-up").
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
from absl import logging

# `compile_concurrently`'s threads when not given: one per host core, at most this many (each
# compile holds its program's HLO and its compiler's working memory, GBs on a large model).
MAX_THREADS = 8

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


def default_threads() -> int:
    """Threads for `compile_concurrently`: the host's cores, at most `MAX_THREADS`."""
    return max(1, min(MAX_THREADS, os.cpu_count() or 1))


def compile_concurrently(calls: Sequence[Callable[[], Any]], threads: int) -> int:
    """Make each call inside `compiling()`, `threads` at a time (in the order given: longest
    compiles first balance best) -> the number of calls that failed.

    A failing call is one warning, not an error: its program is left to compile when the
    call is made for real, which raises the error there if it is one. threads < 1 is a
    ValueError.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}.")

    def compile_one(call: Callable[[], Any]) -> BaseException | None:
        with compiling():  # a context variable: set in this worker thread itself
            try:
                call()
            except Exception as error:  # reported below; the real call raises it again
                return error
        return None

    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="compile") as pool:
        errors = [e for e in pool.map(compile_one, calls) if e is not None]
    for error in errors:
        logging.warning("compiling ahead failed (it compiles when first used): %r", error)
    return len(errors)
