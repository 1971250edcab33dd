"""tests/helpers.py's subprocess_env: what a JAX subprocess of a test sees. On the GPU
machine (2026-11-27) the project's packages live on PYTHONPATH (carried wheels installed with
`--target /tmp/site`); the two two-device tests failed there because the child lost them."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO, subprocess_env


def test_a_subprocess_keeps_the_callers_python_path_after_the_repo(tmp_path, monkeypatch):
    site = tmp_path / "site"  # stands in for /tmp/site: a package only found on PYTHONPATH
    site.mkdir()
    (site / "carried_package.py").write_text("WHERE = 'carried'\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO)]))
    env = subprocess_env(devices=2)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO), str(site)]  # repo first, once
    code = (
        "import jax, carried_package, transformer_jax; "
        "print(carried_package.WHERE, jax.default_backend(), jax.local_device_count())"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr[-2000:]
    # Two fake devices on the CPU backend, whatever accelerator the machine has.
    assert child.stdout.split() == ["carried", "cpu", "2"]


def test_without_a_python_path_the_repo_alone_is_on_it(monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
    env = subprocess_env()
    assert env["PYTHONPATH"] == str(REPO)
    assert env["JAX_PLATFORMS"] == "cuda,cpu"  # no devices asked for: the caller's backend
