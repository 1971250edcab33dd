"""`-n auto` starts no more pytest workers than the memory holds (tests/worker_budget.py),
and on a GPU they share it (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import worker_budget
from tests.helpers import REPO, subprocess_env

GIB = 1 << 30


def test_workers_are_the_cores_unless_the_memory_holds_fewer():
    assert worker_budget.workers(2, 24 * GIB) == 2  # this project's VM: as before
    assert worker_budget.workers(64, 128 * GIB) == 32  # many cores, 2 GiB a core
    assert worker_budget.workers(16, 3 * GIB) == 1  # never none
    assert worker_budget.workers(8, None) == 8  # memory unknown: the cores


def test_available_memory_is_capped_by_a_containers_limit(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 263842304 kB\nMemAvailable: 251658240 kB\n", encoding="utf-8")
    v2, v1 = tmp_path / "memory.max", tmp_path / "limit_in_bytes"
    v2.write_text("max\n", encoding="utf-8")  # cgroup v2 without a limit
    v1.write_text(f"{8 * GIB}\n", encoding="utf-8")  # a container of 8 GiB
    assert worker_budget.available_memory(meminfo, (v2,)) == 240 * GIB
    assert worker_budget.available_memory(meminfo, (v2, v1)) == 8 * GIB
    assert worker_budget.available_memory(tmp_path / "absent", ()) is None


@pytest.mark.parametrize("given, kept", [(None, "false"), ("true", "true")])
def test_the_workers_share_a_gpu_unless_the_user_chose(given, kept):
    # The conftest, imported first in a fresh process: it sets the variable JAX reads at
    # start-up, a user's own value kept; the launches the tests start inherit it.
    env = {k: v for k, v in subprocess_env().items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    if given is not None:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = given
    code = "import os, tests.conftest; print(os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])"
    child = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    assert child.stdout.strip() == kept
