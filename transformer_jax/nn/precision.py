"""The compute dtype that is fast on this machine: `ModelConfig(dtype="auto")` asks here.

bfloat16 pays only where the hardware multiplies it natively with float32 accumulation:
TPUs, GPUs, and CPUs with AMX tiles. On a CPU without AMX (AVX512-BF16 alone, or AVX2),
XLA's bfloat16 matmuls are no faster than float32 and the casts around them cost extra.
Measured on two machines of this project (benchmarks/LOG.md): with AMX, a bf16
2048×256×1024 matmul ran ~7× faster than float32; on an AVX512-BF16 Xeon without AMX it
ran at ~200 GFLOP/s against ~280 in float32, and the fra_eng default step took 264–308 ms
in bfloat16 against 181 ms in float32. Parameters and optimizer state stay float32 either
way, so a checkpoint trained with one compute dtype loads under the other.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax

ACCELERATORS = ("tpu", "gpu", "cuda", "rocm")


def cpu_has_amx(cpuinfo: str | None = None) -> bool:
    """Whether the CPU advertises AMX bfloat16 tiles (`amx_bf16` in /proc/cpuinfo flags)."""
    if cpuinfo is None:
        cpuinfo = _read_cpuinfo()
    return any(
        line.startswith("flags") and "amx_bf16" in line.split() for line in cpuinfo.splitlines()
    )


@functools.cache
def _read_cpuinfo() -> str:
    path = Path("/proc/cpuinfo")  # Linux; elsewhere no AMX is assumed (float32 is safe)
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def fast_compute_dtype(platform: str | None = None, cpuinfo: str | None = None) -> str:
    """ "bfloat16" on TPU/GPU and AMX CPUs, else "float32".

    Args:
      platform: a JAX backend name; defaults to `jax.default_backend()`.
      cpuinfo: the text of /proc/cpuinfo (for tests); read from the machine by default.
    """
    platform = platform or jax.default_backend()
    if platform in ACCELERATORS:
        return "bfloat16"
    return "bfloat16" if cpu_has_amx(cpuinfo) else "float32"


def resolve_dtype(name: str) -> str:
    """A config's dtype name as computed here: "auto" -> `fast_compute_dtype()`, else itself."""
    return fast_compute_dtype() if name == "auto" else name
