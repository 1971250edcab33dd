"""runtime.backend: each knob's "auto" per platform, and the platform known before JAX starts."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from configs import fra_eng
from tests.helpers import subprocess_env
from transformer_jax.runtime import backend, host_memory, xla_flags
from transformer_jax.training import step as step_lib
from transformer_jax.training.builder import build


def test_auto_resolves_per_platform_and_explicit_values_stay():
    assert backend.resolve(backend.GRADIENTS, "auto", "cpu") == "custom_vjp"
    assert backend.resolve(backend.GRADIENTS, "auto", "gpu") == "autodiff"
    assert backend.resolve(backend.GRADIENTS, "auto", "tpu") == "autodiff"
    assert backend.resolve(backend.HOST_MEMORY, "auto", "cpu") == "reuse"
    assert backend.resolve(backend.HOST_MEMORY, "auto", "gpu") == "system"
    assert (
        backend.resolve(backend.GRADIENTS, "custom_vjp", "gpu") == "custom_vjp"
    )  # a choice is kept
    assert [backend.platform_name(n) for n in ("cuda", "ROCM", "tpu", "cpu")] == [
        "gpu",
        "gpu",
        "tpu",
        "cpu",
    ]


def test_the_platform_is_read_without_starting_a_backend(monkeypatch):
    monkeypatch.setattr(xla_flags, "backends_initialized", lambda: False)
    monkeypatch.setattr(backend, "requested_platforms", lambda: "cuda,cpu")
    assert backend.expected_platform() == "gpu"
    monkeypatch.setattr(backend, "requested_platforms", lambda: "")
    installed = {"jax-cuda13-plugin"}

    def version(dist: str) -> str:
        if dist in installed:
            return "0.11.2"
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(backend.importlib.metadata, "version", version)
    assert backend.expected_platform() == "gpu"
    installed = {"libtpu", "jax-cuda12-plugin"}
    assert backend.expected_platform() == "tpu"
    installed = set()
    assert backend.expected_platform() == "cpu"


def test_a_fresh_cpu_process_resolves_host_memory_auto_to_reuse_before_jax_starts():
    script = (
        "from transformer_jax.runtime import host_memory, xla_flags\n"
        "assert not xla_flags.backends_initialized()\n"
        "print(host_memory.apply('auto'), host_memory.in_effect(), "
        "xla_flags.backends_initialized())\n"
    )
    env = {**subprocess_env(), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "reuse", "False"]


@pytest.mark.parametrize(("platform", "want"), [("cpu", "custom_vjp"), ("gpu", "autodiff")])
def test_the_train_step_takes_the_platforms_gradients_rule(monkeypatch, platform, want):
    monkeypatch.setattr(step_lib.jax, "default_backend", lambda: platform)
    config = fra_eng.get_config("runlocal")
    assert config.gradients == "auto"
    built = build(config, src_vocab_size=50, tgt_vocab_size=50, total_steps=10)
    kwargs = step_lib.step_kwargs(config, built.model_config, built.tx, built.schedule)
    assert kwargs["model"].config.gradients == want
    config.gradients = "autodiff"  # an explicit choice wins on every platform
    kwargs = step_lib.step_kwargs(config, built.model_config, built.tx, built.schedule)
    assert kwargs["model"].config.gradients == "autodiff"


def test_host_memory_auto_on_an_accelerator_changes_nothing(monkeypatch):
    monkeypatch.setattr(host_memory, "_applied", None)
    monkeypatch.setattr(backend, "expected_platform", lambda: "gpu")
    assert host_memory.apply("auto")  # "system": glibc's defaults, in effect already
    assert host_memory.in_effect() == "system"
