"""Per-backend defaults: what a run config's "auto" means on CPU, GPU and TPU.

The project's speed knobs were measured on XLA:CPU (benchmarks/README.md, "Numbers behind
the runtime knobs"); an accelerator compiles the same step with other layouts and fusions,
so each knob's "auto" resolves here, by platform, to the value measured to help there:

    knob                  cpu            gpu / tpu     why
    gradients             "custom_vjp"   "autodiff"    custom VJPs put gradient matmuls in
                                                       XLA:CPU's fast layouts; GPU/TPU
                                                       compilers pick layouts themselves
                                                       (H200, README step: 3.21 against
                                                       3.23 ms, a tie; benchmarks/README.md
                                                       "GPU results")
    host_memory           "reuse"        "system"      glibc reuse pays for XLA:CPU's host
                                                       temporaries; accelerators allocate
                                                       on the device
    threefry_lowering     "unrolled"     (JAX's own)   only XLA:CPU has a rolled lowering
    precompile            "off"          "background"  the eval and decoding programs
                                                       compiled in a thread while the run
                                                       trains: a GPU host's spare cores.
                                                       On 2 CPU cores the compiles share
                                                       the cores with the step (LOG.md)

`host_memory` must be fixed before JAX starts its backend, so `expected_platform` answers
without starting one: the backend in use if one is running, else `JAX_PLATFORMS` /
`jax_platforms`, else the accelerator plugins installed (a CUDA or ROCm plugin, libtpu),
else "cpu". An installed plugin on a machine without its device makes it guess "gpu"/"tpu"
and pick "system", which costs XLA:CPU some page faults, never correctness.
"""

from __future__ import annotations

import importlib.metadata

import jax

from transformer_jax.runtime import xla_flags

PLATFORMS = ("cpu", "gpu", "tpu")
_ALIASES = {"cuda": "gpu", "rocm": "gpu", "gpu": "gpu", "tpu": "tpu", "cpu": "cpu"}
# Distributions whose presence means JAX will start an accelerator backend.
_PLUGINS = {
    "gpu": ("jax-cuda12-plugin", "jax-cuda13-plugin", "jax-rocm60-plugin", "jax-rocm7-plugin"),
    "tpu": ("libtpu", "libtpu-nightly"),
}

GRADIENTS = {"cpu": "custom_vjp", "gpu": "autodiff", "tpu": "autodiff"}
HOST_MEMORY = {"cpu": "reuse", "gpu": "system", "tpu": "system"}
PRECOMPILE = {"cpu": "off", "gpu": "background", "tpu": "background"}


def platform_name(name: str) -> str:
    """A JAX backend or platform name ("cuda", "rocm", "gpu", "tpu", "cpu") -> PLATFORMS."""
    return _ALIASES.get(name.lower(), "cpu")


def expected_platform() -> str:
    """The platform this process computes on ("cpu", "gpu", "tpu"), starting no backend."""
    if xla_flags.backends_initialized():
        return platform_name(jax.default_backend())
    requested = requested_platforms().split(",")[0].strip()
    if requested:
        return platform_name(requested)
    for platform in ("tpu", "gpu"):
        for dist in _PLUGINS[platform]:
            try:
                importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
            return platform
    return "cpu"


def requested_platforms() -> str:
    """`JAX_PLATFORMS` / `jax.config.jax_platforms`, e.g. "cuda,cpu" ("" when unset)."""
    return jax.config.jax_platforms or ""


def resolve(knob: dict[str, str], value: str, platform: str | None = None) -> str:
    """`value`, or for "auto" the knob's choice on `platform` (default: `expected_platform()`).

    `knob` is one of the tables above, e.g. `resolve(GRADIENTS, config.gradients)`.
    """
    if value != "auto":
        return value
    return knob[platform or expected_platform()]


class BackendError(RuntimeError):
    """JAX cannot start the platform this process asks for (`start`)."""


def start() -> str:
    """Starts JAX's backend now, as a launcher does once its process settings are applied;
    returns its platform ("cpu", "gpu", "tpu").

    JAX_PLATFORMS=cuda on a machine without a CUDA JAX (or its GPU) otherwise failed at the
    first array: an empty AssertionError or "Unable to initialize backend 'cuda'" in a
    traceback from deep inside the run. Raises `BackendError` naming the platforms asked
    for, JAX's reason and the fixes.
    """
    try:
        return platform_name(jax.devices()[0].platform)
    except (RuntimeError, AssertionError) as error:
        reason = " ".join(str(error).split())[:300] or type(error).__name__
        asked = requested_platforms()
        if not asked:
            raise BackendError(f"JAX could not start a backend ({reason}).") from error
        raise BackendError(
            f"JAX cannot start the platform JAX_PLATFORMS={asked} asks for ({reason}): on "
            f"a GPU install jax[cuda12]=={jax.__version__} (a TPU: jax[tpu]) and check that "
            "the device is visible (nvidia-smi), or unset JAX_PLATFORMS to run on the CPU."
        ) from error
