"""`dtype="auto"`: bfloat16 where the hardware multiplies it natively, float32 elsewhere."""

import jax.numpy as jnp
import pytest

from transformer_jax.nn import ModelConfig, precision

AMX = "processor : 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
NO_AMX = "processor : 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512_fp16\n"


@pytest.mark.parametrize(
    "platform,cpuinfo,want",
    [
        ("tpu", "", "bfloat16"),
        ("gpu", "", "bfloat16"),
        ("cpu", AMX, "bfloat16"),
        ("cpu", NO_AMX, "float32"),  # AVX512-BF16 alone does not make bf16 matmuls fast
        ("cpu", "", "float32"),  # no /proc/cpuinfo (macOS): the safe choice
        ("cpu", "model name : amx_bf16 lookalike\nflags : fpu\n", "float32"),  # flags only
    ],
)
def test_fast_compute_dtype(platform, cpuinfo, want):
    assert precision.fast_compute_dtype(platform, cpuinfo) == want


def test_auto_config_resolves_to_this_machine(monkeypatch):
    cfg = ModelConfig(src_vocab_size=5, tgt_vocab_size=5, dtype="auto")
    want = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[precision.fast_compute_dtype()]
    assert cfg.compute_dtype == want
    monkeypatch.setattr(precision, "fast_compute_dtype", lambda: "bfloat16")
    assert cfg.compute_dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="'auto'"):
        ModelConfig(src_vocab_size=5, tgt_vocab_size=5, dtype="float16")
