"""Ctrl-C that Python would drop, delivered again.

A KeyboardInterrupt raised while the main thread runs a garbage-collector callback (JAX
registers one, `_xla_gc_callback`), a `__del__` method or a weakref callback cannot
propagate: Python hands it to `sys.unraisablehook`, prints "Exception ignored in ...", and
carries on. Building the data set, one Ctrl-C in eight did nothing that way: the build went
on and training started. `redeliver_interrupts()` wraps the hook so that such an interrupt
is raised again in the main thread a moment later, once the callback has returned: a
short-lived thread sends SIGINT to the main thread again (`signal.pthread_kill`, which also
cuts short a blocking call there, as the first one would have; `_thread.interrupt_main`
where there is no pthread_kill), so whatever SIGINT handler is installed runs, the train
loop's `preemption.StopSignals` too. Nothing is printed for it. Every other unraisable
exception goes to the hook that was there before.

Launchers install it as they parse their flags (`launch.flags_parser`); importing this
module changes nothing.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

# How long the re-delivery waits: enough for the callback that swallowed the interrupt to
# return; short against a person's reaction to a Ctrl-C.
DELAY_S = 0.01


class _Redeliver:
    """`sys.unraisablehook` that re-raises a swallowed KeyboardInterrupt in the main thread."""

    def __init__(self, previous: Callable[[Any], None]):
        self.previous = previous

    def __call__(self, unraisable: Any) -> None:
        exc_type = getattr(unraisable, "exc_type", None)
        if isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt):
            timer = threading.Timer(DELAY_S, _interrupt_main_thread)
            timer.daemon = True
            timer.start()
            return
        self.previous(unraisable)


def _interrupt_main_thread() -> None:
    """SIGINT to the main thread: its blocking system call (a sleep, a read) returns at once
    and the handler runs. `_thread.interrupt_main` only sets the flag Python checks between
    bytecodes: a main thread asleep would not see it until it woke."""
    if hasattr(signal, "pthread_kill"):
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    else:  # Windows
        _thread.interrupt_main()


def redeliver_interrupts() -> None:
    """Wraps `sys.unraisablehook` (once: a second call changes nothing) so that a
    KeyboardInterrupt Python would drop is raised again in the main thread."""
    if not any(isinstance(hook, _Redeliver) for hook in _chain(sys.unraisablehook)):
        sys.unraisablehook = _Redeliver(sys.unraisablehook)


def _chain(hook: Any) -> list[Any]:
    """The hook and the hooks it wraps (`previous`), outermost first."""
    chain = []
    while hook is not None and hook not in chain:
        chain.append(hook)
        hook = getattr(hook, "previous", None)
    return chain
