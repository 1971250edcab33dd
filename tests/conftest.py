"""Session-wide test settings, applied before JAX is first imported.

- XLA's backend optimisation level 0: the test models are tiny, so compile time dominates
  and level 0 roughly halves it; numerics are unchanged within the tests' tolerances.
- A persistent compilation cache shared by the pytest workers and the subprocesses that
  `tests/helpers.subprocess_env` starts, so one program compiles once per run.
"""

from __future__ import annotations

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
