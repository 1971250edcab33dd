"""One point's training process, stopped the way the train launcher expects to be stopped.

The train launcher saves a checkpoint on SIGINT/SIGTERM/SIGHUP and exits with
`training.preemption.EXIT_CODE` (75) (transformer_jax/training/preemption.py); saving can
take seconds. `subprocess.run` gives its child 0.25 s after a Ctrl-C, then SIGKILLs it, and a
SIGTERM to the sweep alone left the child training as an orphan. So here:

- the child runs in its own session (process group): a Ctrl-C in the terminal reaches the
  sweep only, which forwards it once, so the child sees exactly one signal;
- the first SIGINT/SIGTERM/SIGHUP to the sweep is forwarded to the child, which saves and
  exits (SIGHUP: the sweep's terminal closed; the child, in a session of its own, never
  gets the terminal's);
  the sweep then raises `SweepInterrupted` with the child's exit code; a second signal
  kills the child at once (as a second Ctrl-C stops the train launcher at once);
- on Linux the child gets SIGTERM when the sweep dies by any means, SIGKILL included
  (`prctl(PR_SET_PDEATHSIG)`), so it saves and stops instead of training on unseen.
  Elsewhere a killed sweep can still leave its child running. The prctl is made by a tiny
  Python that then execs the command (`_DIE_WITH_PARENT`; the setting survives exec), not
  by a `preexec_fn`: that runs Python between fork and exec in the sweep, which has JAX's
  threads by then, and can deadlock there (JAX warns about exactly that).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from transformer_jax.training.preemption import EXIT_CODE as PREEMPTED  # saved, then stopped
from transformer_jax.training.preemption import signals_to_catch

# argv: the sweep's PID, then the command. PR_SET_PDEATHSIG is 1 (linux/prctl.h); a sweep
# that died before the prctl is seen by the PID check (the child was re-parented).
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(128 + signal.SIGTERM)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class SweepInterrupted(Exception):
    """The sweep was stopped by a signal; `exit_code` is the stopped child's (75 if it saved)."""

    def __init__(self, signal_name: str, exit_code: int, point: str | None = None):
        super().__init__(signal_name, exit_code)
        self.signal_name, self.exit_code, self.point = signal_name, exit_code, point

    def __str__(self) -> str:
        """One line: where it stopped and how to go on (`point` is set by the runner)."""
        if self.point is None:
            return f"Stopped by {self.signal_name} between points; re-run the same command."
        how = (
            "its checkpoint saved"
            if self.exit_code == PREEMPTED
            else f"its trainer exited {self.exit_code}"
        )
        return (
            f"Stopped by {self.signal_name} during point {self.point} ({how}); re-run the "
            "same command to resume."
        )


class SignalGuard:
    """While installed (main thread only), the signals the train launcher stops on
    (`preemption.signals_to_catch`) are forwarded to the running child:
    the first asks it to stop, a second kills it. With no child running the first one raises
    `SweepInterrupted` at once (nothing to wait for)."""

    def __init__(self) -> None:
        self.received: str | None = None
        self.child: subprocess.Popen | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in signals_to_catch():
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        child = self.child
        if child is None or child.poll() is not None:
            self.received = self.received or name
            raise SweepInterrupted(name, 128 + signum)
        if self.received is None:
            self.received = name
            child.send_signal(signum)  # the launcher saves a checkpoint and exits 75
        else:
            child.kill()  # a second signal: stop now


def dying_with_parent(command: Sequence[str]) -> list[str]:
    """`command` (starting with an executable's path) made to get SIGTERM when this process
    dies, on Linux; elsewhere unchanged."""
    if not sys.platform.startswith("linux"):
        return list(command)
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *command]


def run_child(
    command: Sequence[str],
    out: IO[str],
    guard: SignalGuard,
    *,
    cwd: str | Path | None = None,
    timeout: float | None = None,
) -> int:
    """Runs `command` with its output into `out`; returns its exit code.

    Raises `SweepInterrupted` (with the child's exit code) if a signal arrived while it ran,
    and `subprocess.TimeoutExpired` after killing it if it ran past `timeout`.
    """
    child = subprocess.Popen(
        dying_with_parent(command),
        cwd=cwd,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a terminal's Ctrl-C reaches the sweep, which forwards it
    )
    guard.child = child
    try:
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
    except BaseException:
        if child.poll() is None:  # anything unexpected here: never leave it running
            child.kill()
            child.wait()
        raise
    finally:
        guard.child = None
    if guard.received is not None:  # killed by a second signal: the shell's 128 + N
        raise SweepInterrupted(guard.received, code if code >= 0 else 128 - code)
    return code
