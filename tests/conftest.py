"""Session-wide test settings, applied before JAX is first imported.

- XLA's backend optimisation level 0: the test models are tiny, so compile time dominates
  and level 0 roughly halves it; numerics are unchanged within the tests' tolerances.
- A persistent compilation cache shared by the pytest workers and the subprocesses that
  `tests/helpers.subprocess_env` starts, so one program compiles once per run.
- JAX's in-memory caches emptied after each test file: a worker otherwise keeps every
  program it ever compiled, and grew to 8.3 GB by the end of the suite (2 workers), which
  `-n auto` on a machine with many cores and less memory a core would not survive. A
  program a later file needs again comes back from the persistent cache.
- `-n auto` starts one worker a core, but no more than the available memory holds
  (`tests/worker_budget.py`); on a GPU the workers share it, each allocating what it uses
  (`XLA_PYTHON_CLIENT_PREALLOCATE=false`, as `benchmarks/gpu_check.sh` ran the tests there).
"""

from __future__ import annotations

import gc
import os
import tempfile
from pathlib import Path

_FLAG = "--xla_backend_optimization_level=0"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(Path(tempfile.gettempdir()) / "transformer_jax_test_jax_cache")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
# On a GPU every pytest worker (and each launch a test starts) shares the one device: JAX
# would take 75 % of its memory in the first worker and leave the others too little.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


import pytest  # noqa: E402  (after the environment above, which must come before JAX)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (the README's test command): xdist's count, capped by the memory
    (`tests.worker_budget`); PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    from xdist.plugin import pytest_xdist_auto_num_workers as xdist_count

    from tests import worker_budget

    return worker_budget.workers(xdist_count(config), worker_budget.available_memory())


@pytest.fixture(scope="session")
def tiny_workdir(tmp_path_factory):
    """The fault tests' tiny run (`tests.tiny_run`: runlocal on 500 pairs) trained 4 steps,
    checkpoints at 2 and 4: trained once per test process and shared, read-only, by the
    translate, serve and evaluate tests, which decode from it and never write into it."""
    from tests.tiny_run import tiny_config
    from transformer_jax.training import train_and_evaluate

    path = tmp_path_factory.mktemp("tiny_workdir")
    train_and_evaluate(tiny_config(4), path)
    return path


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs_after_each_file():
    """Frees the file's compiled programs and traces (see the module docstring)."""
    yield
    import jax

    jax.clear_caches()
    gc.collect()
