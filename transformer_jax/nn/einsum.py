"""Einsum: the one layer that owns a weight and applies it (gemma's `_layers.Einsum`).

    query = Einsum("BTD,DHK->BHTK", (D, H, K), dtype, gradients, use_bias=True)
    q = query(x)  # (B, T, D) -> (B, H, T, K)

The math is `ops.dense`: the cast to the compute dtype, `ops.einsum` with its gradient
rule, float32 accumulation and bias, one cast out. The FFN (`ops.position_wise_ffn`), the
tied output (`Embed.attend`) and the additive scorer apply their weights through the same
function; their parameters keep the names and places checkpoints have for them.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from transformer_jax import ops
from transformer_jax.nn.params import param
from transformer_jax.ops.matmul import bias_axes

Array = jnp.ndarray


class Einsum(nn.Module):
    """x -> einsum(spec, x, kernel) (+ bias), for one float32 `kernel` of `shape`.

    Attributes:
      spec: input, then kernel, e.g. "BTD,DHK->BHTK".
      shape: the kernel's shape, one size per index of the spec's second operand.
      dtype: the compute dtype (parameters stay float32).
      gradients: the matmul's derivative rule, "autodiff" or "custom_vjp" (`ops.einsum`).
      use_bias: a zero-initialised `bias` over the kernel's output axes ((H, K) above).
      out_dtype: the result's dtype; None = `dtype`.

    The kernel starts Glorot uniform, its fan-in the contracted axes and its fan-out the
    output axes (D and H·K above), as flax's Dense and MultiHeadDotProductAttention do.
    """

    spec: str
    shape: tuple[int, ...]
    dtype: jnp.dtype
    gradients: str = "autodiff"
    use_bias: bool = False
    out_dtype: jnp.dtype | None = None

    @nn.compact
    def __call__(self, x: Array) -> Array:
        w_axes, out = self.spec.split("->")[0].split(",")[1], self.spec.split("->")[1]
        bias_names = bias_axes(self.spec)
        init = nn.initializers.xavier_uniform(
            in_axis=tuple(i for i, name in enumerate(w_axes) if name not in out),
            out_axis=tuple(w_axes.index(name) for name in bias_names),
        )
        kernel = param(self, "kernel", init, self.shape)
        bias = None
        if self.use_bias:
            size = dict(zip(w_axes, self.shape, strict=True))
            shape = tuple(size[name] for name in bias_names)
            bias = param(self, "bias", nn.initializers.zeros, shape)
        return ops.dense(
            self.spec,
            x,
            kernel,
            bias,
            dtype=self.dtype,
            out_dtype=self.out_dtype,
            gradients=self.gradients,
        )
