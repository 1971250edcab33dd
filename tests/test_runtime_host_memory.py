"""`config.host_memory`: XLA:CPU's per-step temporaries reuse freed host memory."""

import logging
import subprocess
import sys
import textwrap

import pytest

from configs import fra_eng
from tests.helpers import subprocess_env
from transformer_jax.runtime import host_memory
from transformer_jax.training import validate_config


def test_a_bad_mode_is_rejected_naming_the_choices():
    config = fra_eng.get_config()
    assert config.host_memory == "auto"  # "reuse" on CPU (runtime.backend)
    validate_config(config)
    config.host_memory = "fast"
    choices = r"\('auto', 'reuse', 'system'\)"
    with pytest.raises(ValueError, match=rf"host_memory='fast' is not one of {choices}"):
        validate_config(config)


def test_after_the_backend_started_reuse_is_not_applied_and_says_so(monkeypatch, caplog):
    import jax.numpy as jnp

    jnp.ones(1).block_until_ready()  # the backend exists in the test process
    monkeypatch.setattr(host_memory, "_applied", None)
    with caplog.at_level(logging.INFO):
        assert not host_memory.apply("reuse")
    assert "not applied" in caplog.text and "backend already started" in caplog.text
    assert host_memory.in_effect() == "system"
    assert host_memory.apply("system")  # the defaults are what the process has


# A jitted function whose 128 MiB temporary (sin(x), the dot's operand) XLA:CPU allocates
# on every call: the fewest minor page faults of one call, after warm-up. The fewest, not
# the median: JAX frees a call's buffers a few calls later, and a small allocation can
# land in a freed block, so under "reuse" the heap still grows (and faults) now and then
# when calls follow each other this closely; under "system" no call escapes the faults.
WORKER = textwrap.dedent(
    """
    import resource, sys
    from transformer_jax.runtime import host_memory
    ok = host_memory.apply(sys.argv[1])
    import jax, jax.numpy as jnp
    x, v = jnp.ones((8192, 4096)), jnp.ones((4096,))
    f = jax.jit(lambda x, v: jnp.sin(x) @ v)
    faults = []
    for _ in range(16):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        f(x, v).block_until_ready()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(ok, host_memory.in_effect(), min(faults[4:]))
    """
)
TEMP_PAGES = 8192 * 4096 * 4 // 4096


def _faults_per_call(mode: str) -> tuple[str, str, float]:
    out = subprocess.run(
        [sys.executable, "-c", WORKER, mode],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    ok, in_effect, faults = out.stdout.split()
    return ok, in_effect, float(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_reuse_keeps_the_temporaries_pages_and_system_faults_them_in_every_call():
    ok, in_effect, faults = _faults_per_call("system")
    assert (ok, in_effect) == ("True", "system")
    assert faults > 0.5 * TEMP_PAGES  # glibc mmaps and unmaps the block on every call
    ok, in_effect, faults = _faults_per_call("reuse")
    assert (ok, in_effect) == ("True", "reuse")
    assert faults < 0.05 * TEMP_PAGES  # a call that reused the freed block's pages
