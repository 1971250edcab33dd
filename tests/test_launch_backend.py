"""A platform JAX cannot start (JAX_PLATFORMS=cuda on a machine without a CUDA JAX) is one
FATAL line from every launcher that computes, not an empty AssertionError traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from configs import fra_eng
from tests.helpers import REPO, one_fatal_line, subprocess_env
from transformer_jax.runtime import backend
from transformer_jax.workdir.checkpoints import save_config


@pytest.fixture(scope="module")
def run_config(tmp_path_factory):
    """A workdir holding only config.json: the launchers read it before starting JAX."""
    workdir = tmp_path_factory.mktemp("config_only")
    save_config(fra_eng.get_config("runlocal"), workdir)
    return workdir


def _launch(*args: str, platforms: str) -> subprocess.CompletedProcess:
    env = {**subprocess_env(), "JAX_PLATFORMS": platforms}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True,
        input="go .\n", timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("platforms", ["cuda", "tpu"])
def test_translate_names_the_platform_and_the_fixes(run_config, platforms):
    fatal = one_fatal_line(_launch("experiments.translate", f"--workdir={run_config}",
                                   platforms=platforms))  # fmt: skip
    assert f"JAX cannot start the platform JAX_PLATFORMS={platforms} asks for (" in fatal
    assert "unset JAX_PLATFORMS to run on the CPU" in fatal


@pytest.mark.parametrize(
    "launcher",
    [
        ["experiments.train", "--config=configs/fra_eng.py:runlocal"],
        ["experiments.evaluate"],
        ["experiments.export", "--output_dir=unused"],
        ["experiments.average_checkpoints"],
        ["experiments.serve", "--port=0"],
    ],
    ids=lambda args: args[0].split(".")[1],
)
def test_every_launcher_that_computes_says_so_in_one_line(run_config, tmp_path, launcher):
    workdir = tmp_path / "fresh" if launcher[0] == "experiments.train" else run_config
    fatal = one_fatal_line(_launch(*launcher, f"--workdir={workdir}", platforms="cuda"))
    assert "JAX_PLATFORMS=cuda" in fatal


def test_on_this_machine_the_backend_starts():
    assert backend.start() == backend.expected_platform()
