"""transformer_jax.runtime: importing changes nothing; configure_process applies the knobs."""

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import fra_eng
from transformer_jax import runtime
from transformer_jax.runtime import threefry
from transformer_jax.training import training_defaults, validate_config

ROOT = Path(__file__).resolve().parent.parent

# Runs in a fresh interpreter: everything a library import could change in the process.
_SNAPSHOT = r"""
import ctypes, json, os, sys
import jax
from jax._src.interpreters import mlir
from jax._src.random import threefry2x32

def malloc_probe():
    # glibc: does a 64 MiB block still come from mmap (M_MMAP_MAX, M_ARENA_MAX untouched)?
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        return None
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
        ).split()]
    libc.mallinfo2.restype = Info
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2().hblks
    block = libc.malloc(64 << 20)
    mapped = libc.mallinfo2().hblks - before
    libc.free(block)
    return mapped

def snapshot():
    rules = mlir._platform_specific_lowerings["cpu"].get(threefry2x32.threefry2x32_p)
    values = {name: repr(jax.config.values[name]) for name in sorted(jax.config.values)}
    env = {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "JAX_", "MALLOC_", "TF_"))}
    return {
        "threefry_cpu_rule": getattr(rules, "__qualname__", repr(rules)),
        "threefry_default_rule": repr(mlir._lowerings.get(threefry2x32.threefry2x32_p)),
        "jax_config": values,
        "env": env,
        "malloc_mmaps_large_blocks": malloc_probe(),
    }

before = snapshot()
import transformer_jax
for name in ("nn", "ops", "data", "decoding", "training", "evaluation", "runtime", "sweeps"):
    __import__(f"transformer_jax.{name}")
import transformer_jax.training.train, transformer_jax.evaluation.report  # the heaviest paths
after = snapshot()
if sys.argv[1:] == ["configure"]:
    from transformer_jax.training import training_defaults
    transformer_jax.runtime.configure_process(training_defaults())
    after = snapshot()
print(json.dumps({"before": before, "after": after}))
"""


def _run_fresh(script: str, *args: str) -> str:
    """stdout of `script` in a fresh interpreter with a clean environment (no XLA_FLAGS)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"},
        timeout=300,
    ).stdout


def _snapshots(*args: str) -> dict:
    return json.loads(_run_fresh(_SNAPSHOT, *args).strip().splitlines()[-1])


def test_importing_the_package_changes_nothing_in_jax_xla_or_malloc():
    result = _snapshots()
    before, after = result["before"], result["after"]
    assert before["threefry_cpu_rule"] == after["threefry_cpu_rule"]
    assert before["threefry_default_rule"] == after["threefry_default_rule"]
    assert before["jax_config"] == after["jax_config"]
    assert before["env"] == after["env"]
    assert before["malloc_mmaps_large_blocks"] == after["malloc_mmaps_large_blocks"]


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator")
def test_configure_process_is_what_changes_the_process():
    """The same probe sees configure_process's changes: the test above could fail."""
    result = _snapshots("configure")
    before, after = result["before"], result["after"]
    assert before["threefry_cpu_rule"] != after["threefry_cpu_rule"]  # unrolled now
    if before["malloc_mmaps_large_blocks"] is not None:  # glibc with mallinfo2
        assert before["malloc_mmaps_large_blocks"] == 1
        assert after["malloc_mmaps_large_blocks"] == 0  # host_memory="reuse"


def test_threefry_lowering_is_a_validated_run_config_key():
    assert training_defaults().threefry_lowering == "auto"
    config = fra_eng.get_config("d2l")
    config.threefry_lowering = "loop"
    with pytest.raises(ValueError, match=r"threefry_lowering='loop' is not one of"):
        validate_config(config)
    with pytest.raises(ValueError, match="threefry_lowering"):
        runtime.configure_process(config)  # refused before anything is changed


def _bits():
    # A fresh function each time: the lowering is chosen when a function is traced.
    key = jax.random.fold_in(jax.random.key(3), 7)
    return np.asarray(jax.jit(lambda k: jax.random.bits(k, (64, 33), jnp.uint32))(key))


def _hlo(n: int) -> str:
    return jax.jit(lambda k: jax.random.bits(k, (n,))).lower(jax.random.key(0)).as_text()


def test_unrolled_threefry_gives_the_same_bits_without_loops():
    assert threefry.available()
    try:
        assert threefry.apply("rolled")
        rolled, rolled_hlo = _bits(), _hlo(8)
        assert threefry.apply("auto")
        unrolled, unrolled_hlo = _bits(), _hlo(9)
    finally:
        threefry.apply("rolled")  # JAX's default, as this process had it
    np.testing.assert_array_equal(rolled, unrolled)
    assert "while" in rolled_hlo and "while" not in unrolled_hlo


def test_cpu_devices_checks_its_value():
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="cpu_devices=.*whole number >= 1"):
            runtime.cpu_devices.check(bad)
    runtime.cpu_devices.check(0)
    runtime.cpu_devices.check(2)


def test_cpu_devices_sets_the_count_before_the_backend_and_refuses_after():
    script = """
import jax, jax.numpy as jnp
from transformer_jax.runtime import cpu_devices
cpu_devices.apply(3)
print(jax.local_device_count(), float(jnp.ones(2).sum()))
cpu_devices.apply(3)  # already so: nothing to do
try:
    cpu_devices.apply(2)
except ValueError as error:
    print(error)
"""
    out = _run_fresh(script).splitlines()
    assert out[0] == "3 2.0"
    assert out[1].startswith("cpu_devices=2 cannot take effect: JAX has already started")
