"""Compile the programs a decoding call would run, without running them.

    with compile_only.compiling():
        translator.translate(sentences)   # compiles each program the call needs; decodes nothing

    with compile_only.compiling(threads=8):   # the same, up to 8 programs compiling at once
        for batch in batches:
            translator.translate(batch)       # returns at once; the block's end waits

On an accelerator a decoding program costs seconds to compile (an H200 compiled the README
report's two beam-search programs in 22 s) and milliseconds to run, and which programs a call
needs (batch rows, program widths, devices) follows from its sentences (`batch_decode`). So
the surest way to compile them ahead (a server's warm-up; a training run's evaluation and
report programs, in a background thread while it trains: `training.precompile`) is to make
that very call with the decoders switched to compiling: inside `compiling()`, each jitted
decoder (`sharded.sharded_decoder`, `sharded_nbest_decoder`) traces, lowers and compiles
for its arguments, which fills the jitted function's own cache (a later call with the same
shapes and shardings compiles nothing), and returns zeros of its output's shape instead of
running: the caller's "translations" are empty. A program this process has already compiled
or run is not traced again. The switch is a context variable, so it holds in the thread that
set it only: decoding in other threads (the training loop's evaluators) runs as usual.

With `threads` > 1 the decoder is traced and lowered in the calling thread (Python) and
compiled in one of `threads` worker threads (XLA compiles outside the GIL), and the call
returns at once: the programs of many calls compile in parallel, one per host core, instead of
one after another (benchmarks/README.md, "Server warm-up"). The block's end waits for them
(`Session.wait` waits earlier); a compile that fails there is one warning, and its program
compiles when first used, which raises the error there if it is one. A `compiling()` inside
another joins the outer block's session.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
from absl import logging

from transformer_jax.runtime import compile_log, cpu_devices, host_memory

# `default_threads`: one per host core, at most this many (each compile holds its program's
# HLO and its compiler's working memory, GBs on a large model).
MAX_THREADS = 8


def default_threads() -> int:
    """Worker threads for compiling ahead (a server's warm-up, a run's precompile thread,
    `ahead`): the host's cores, at most `MAX_THREADS`; 1 while `host_memory="reuse"` is in
    effect (the CPU default), whose one malloc arena makes concurrent compiles wait on each
    other: there 2 threads warmed a server up 5 % slower, with "system" 25 % faster
    (benchmarks/LOG.md, 2026-11-27 tenth session)."""
    if host_memory.in_effect() == "reuse":
        return 1
    return max(1, min(MAX_THREADS, cpu_devices.local_cores()))  # taskset's, not the machine's


class Session:
    """What one `compiling()` block shares: its worker threads (none: each program compiles
    in the calling thread) and the compiles handed to them."""

    def __init__(self, threads: int):
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a whole number >= 1, got {threads!r}.")
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="compile")
            if threads > 1
            else None
        )
        self._futures: list[concurrent.futures.Future] = []

    def compile(self, fn: Any, args: tuple) -> Any:
        """Compiles the jitted `fn` for `args` (unless this process has compiled or run it)
        -> host zeros shaped as its output."""
        signature = _signature(args)
        out_info = _seen(fn, signature)
        if out_info is None:
            traced = fn.trace(*args)
            out_info = traced.out_info
            _remember(fn, signature, out_info)
            # Lowered here: under this thread's JAX settings (e.g. a `default_matmul_precision`
            # block, thread-local), which key the jitted function's cache: lowered in a worker
            # without them, the later call here would miss it and compile again.
            lowered = traced.lower()
            if self._pool is None:
                lowered.compile()
            else:
                # The worker takes this thread's context (the program's compile_log kind)
                # and its trace seconds (counted with the program's compile).
                handed = compile_log.hand_over()
                run = contextvars.copy_context().run
                self._futures.append(self._pool.submit(run, _compile, lowered, handed))
        return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), out_info)

    def wait(self) -> int:
        """Waits for the compiles handed to the worker threads so far -> how many failed
        (each one warning)."""
        futures, self._futures = self._futures, []
        failed = 0
        for future in futures:
            error = None if future.cancelled() else future.exception()
            if error is not None:
                failed += 1
                logging.warning("compiling ahead failed (it compiles when first used): %r", error)
        return failed

    def cancel(self) -> None:
        """Drops the compiles handed over that no worker has started."""
        for future in self._futures:
            future.cancel()

    def close(self, *, cancel: bool = False) -> None:
        """Waits for the workers (`cancel`: only for the compiles already running) and ends
        them."""
        if cancel:
            self.cancel()
        self.wait()
        if self._pool is not None:
            self._pool.shutdown()


_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "decode_compile_only", default=None
)


@contextlib.contextmanager
def compiling(threads: int = 1) -> Iterator[Session]:
    """Within the block (this thread only), decoders compile and return zeros, `threads`
    programs at a time (module doc); inside another block, the outer block's session."""
    outer = _SESSION.get()
    if outer is not None:
        yield outer
        return
    session = Session(threads)
    token = _SESSION.set(session)
    try:
        yield session
    except BaseException:
        session.close(cancel=True)
        raise
    else:
        session.close()
    finally:
        _SESSION.reset(token)


def active() -> bool:
    """True inside `compiling()` in this thread."""
    return _SESSION.get() is not None


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, or inside `compiling()`: compile `fn` (a jitted function) for `args`
    and return host zeros shaped as its output (the same tree)."""
    session = _SESSION.get()
    if session is not None:
        return session.compile(fn, args)
    out = fn(*args)
    _remember(fn, _signature(args), jax.tree.map(_shape_of, out))
    return out


def ahead(items: Callable[[], Sequence[Any]], decode: Callable[[Any], Any]) -> None:
    """`decode(item)` for each of `items()` inside `compiling(threads=default_threads())`, so
    that their programs compile at once instead of each when first reached; nothing (and
    `items` not called) with one thread or inside an open `compiling()` block (which compiles
    them), nothing with fewer than two items. E.g. a decoding call's first batch of each
    program width (`batch_decode.decode_ids`)."""
    threads = default_threads()
    if threads < 2 or active():
        return
    chosen = items()
    if len(chosen) < 2:
        return
    with compiling(threads=threads):
        for item in chosen:
            decode(item)


# The output shapes of the programs this process has compiled or run in `call`, by jitted
# function and argument signature: a `compiling()` block finds those without tracing them
# again (a program whose compile failed in a worker too: it compiles when first used).
_SEEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SEEN_LOCK = threading.Lock()


def _seen(fn: Any, signature: tuple) -> Any:
    with _SEEN_LOCK:
        return _SEEN.get(fn, {}).get(signature)


def _remember(fn: Any, signature: tuple, out_info: Any) -> None:
    with _SEEN_LOCK:
        _SEEN.setdefault(fn, {})[signature] = out_info


def _compile(lowered: Any, handed: Any) -> None:
    compile_log.take_over(handed)
    lowered.compile()


def _shape_of(x: Any) -> jax.ShapeDtypeStruct:
    dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    return jax.ShapeDtypeStruct(np.shape(x), dtype)


def _signature(args: tuple) -> tuple:
    """What a jitted function's cache tells calls apart by: the tree, and each leaf's shape,
    dtype and sharding (None for host values)."""
    leaves, tree = jax.tree.flatten(args)
    return tree, tuple(
        (np.shape(x), str(getattr(x, "dtype", type(x))), getattr(x, "sharding", None))
        for x in leaves
    )
