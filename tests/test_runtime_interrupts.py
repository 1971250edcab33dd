"""A Ctrl-C that Python would drop (raised inside a garbage-collector callback, as JAX's
`_xla_gc_callback`) is delivered again by `runtime.interrupts`, and a launcher installs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from tests.helpers import REPO, subprocess_env

# SIGINT arrives while a gc callback runs: its KeyboardInterrupt is raised inside the
# callback, where Python can only report it ("Exception ignored in ...") and go on.
SWALLOWED = textwrap.dedent(
    """
    import gc, os, signal, sys, time
    # Python's own Ctrl-C handler, which it installs only where SIGINT did not come in
    # ignored: a background job of a script (`cmd &`) starts with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    {install}
    def callback(phase, info):
        if phase == "start":
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):  # the handler runs here, inside the callback
                pass
    gc.callbacks.append(callback)
    gc.collect()
    gc.callbacks.remove(callback)
    print("after the collection", flush=True)
    time.sleep({wait})
    print("finished", flush=True)
    """
)


def run(install: str, wait: float) -> subprocess.CompletedProcess:
    """The program above; `wait`: how long it sleeps after the collection (an interrupt
    that comes cuts it short)."""
    code = SWALLOWED.format(install=install, wait=wait)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=subprocess_env(), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def test_without_the_hook_python_drops_the_interrupt():
    # What the module exists for: the interrupt is reported and the program goes on.
    result = run("", wait=0.5)
    assert result.returncode == 0 and "finished" in result.stdout
    assert "KeyboardInterrupt" in result.stderr


def test_the_hook_raises_it_again_after_the_callback():
    install = "from transformer_jax.runtime.interrupts import redeliver_interrupts\n"
    install += "redeliver_interrupts(); redeliver_interrupts()  # a second call: no change"
    start = time.monotonic()
    result = run(install, wait=60.0)
    # It cuts the sleep short, as the first SIGINT would have (not once the sleep ends).
    assert time.monotonic() - start < 30.0
    # The collection ends, then the interrupt comes: the sleep is cut, nothing after it runs.
    assert "after the collection" in result.stdout and "finished" not in result.stdout
    assert result.returncode != 0 and "KeyboardInterrupt" in result.stderr
    assert "Exception ignored" not in result.stderr


def test_other_unraisable_exceptions_reach_the_previous_hook():
    from transformer_jax.runtime import interrupts

    seen = []
    hook = interrupts._Redeliver(seen.append)

    class Report:
        exc_type = ValueError

    hook(Report())
    assert [r.exc_type for r in seen] == [ValueError]


def test_launchers_install_it_as_they_parse_their_flags():
    code = (
        "import sys\n"
        "from absl import flags\n"
        "from transformer_jax import launch\n"
        "from transformer_jax.runtime import interrupts\n"
        "parse = launch.flags_parser(flag_values=flags.FlagValues(), module='x')\n"
        "parse(['prog'])\n"
        "print(any(isinstance(h, interrupts._Redeliver) for h in "
        "interrupts._chain(sys.unraisablehook)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=subprocess_env(), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "True"
