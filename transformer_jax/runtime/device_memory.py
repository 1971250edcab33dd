"""A device that ran out of memory, as one line: what ran, on which device, what to change.

XLA reports an allocation it cannot make (a GPU's or TPU's memory; the host's on XLA:CPU) as
a `jax.errors.JaxRuntimeError` whose text starts with `RESOURCE_EXHAUSTED`, a long traceback
by default. JAX dispatches asynchronously, so the error is raised where a result is first
needed (a metrics fetch, the next step's call), not always by the call that ran out: each
user of `out_of_memory` names the stage that was running, not the line that raised.

    with device_memory.out_of_memory(lambda: f"in the train step at step {step}", fixes):
        ...  # a RESOURCE_EXHAUSTED here becomes DeviceMemoryError(one line)

The line names the device and, where the backend tells (GPU, TPU), the memory JAX may use
and its peak; XLA's own words, with a byte count also in GiB; then the caller's fixes. On a
GPU JAX takes 75 % of the memory at start-up (`XLA_PYTHON_CLIENT_MEM_FRACTION`); the line
says so where more could be had.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator

_MARK = "RESOURCE_EXHAUSTED"
_GPU_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"  # JAX's share of a GPU's memory, default .75
_GIB = 1 << 30


class DeviceMemoryError(RuntimeError):
    """A device (or the host, on XLA:CPU) ran out of memory; the message says what to change."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is XLA's report of an allocation it could not make. Imports nothing:
    a process that never imported JAX (the CTranslate2 server) has no such error."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(error, jax.errors.JaxRuntimeError) and _MARK in str(error)


def describe(error: BaseException, doing: str) -> str:
    """'The <device> ran out of memory <doing> (<memory>; XLA: <its words>)'."""
    import jax  # imported already: the error came from it

    device = jax.local_devices()[0]
    what = (
        "host (XLA:CPU)"
        if device.platform == "cpu"
        else f"{device.device_kind} ({device.platform})"
    )
    facts = [f for f in (_memory(device), f"XLA: {_xla_words(error)}") if f]
    return f"The {what} ran out of memory {doing} ({'; '.join(facts)})"


@contextlib.contextmanager
def out_of_memory(doing: str | Callable[[], str], fixes: str | Callable[[], str]) -> Iterator[None]:
    """Turns XLA's out-of-memory error inside into `DeviceMemoryError`: `describe(doing)`, then
    `fixes`. Either may be a function, called only then (a step number that moves on)."""
    try:
        yield
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        doing_text = doing() if callable(doing) else doing
        fixes_text = fixes() if callable(fixes) else fixes
        raise DeviceMemoryError(f"{describe(error, doing_text)}. {fixes_text}") from error


def _memory(device) -> str:
    """What the backend tells of the device's memory: JAX's limit and peak (GPU, TPU)."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # a backend without statistics: nothing to add, not a second failure
        stats = {}
    limit, peak = stats.get("bytes_limit"), stats.get("peak_bytes_in_use")
    if not limit:
        return ""
    text = f"JAX may use {limit / _GIB:.1f} GiB of it"
    if peak:
        text += f", {peak / _GIB:.1f} GiB at the peak"
    if device.platform == "gpu" and _gpu_fraction() < 0.9:
        # The rest is idle, or another process's (two runs on one GPU): the user knows which.
        text += (
            f"; JAX takes {_GPU_FRACTION} of a GPU at start-up (.75 by default): .95 gives it "
            "more where no other process uses this GPU"
        )
    return text


def _gpu_fraction() -> float:
    """JAX's share of a GPU's memory as set (a value JAX could not read counts as all)."""
    try:
        return float(os.environ.get(_GPU_FRACTION) or 0.75)
    except ValueError:
        return 1.0


def _xla_words(error: BaseException) -> str:
    """XLA's first line after its status code, a byte count also in GiB, at most 300 chars."""
    text = str(error)
    text = text[text.index(_MARK) + len(_MARK) :].lstrip(": ").splitlines()[0].strip().rstrip(".")

    def gib(match: re.Match) -> str:
        return f"{match.group(0)} ({int(match.group(1)) / _GIB:.1f} GiB)"

    text = re.sub(r"\b(\d{7,}) ?bytes\b", gib, text)
    return text if len(text) <= 300 else text[:297] + "..."
