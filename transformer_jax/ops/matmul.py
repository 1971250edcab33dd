"""Two-operand einsum that runs low-precision inputs on the fast path, forward and backward.

On CPUs with AMX/AVX512-BF16 (and on TPU) a bfloat16 matmul is fast only when it
accumulates in float32 (`preferred_element_type=float32`): measured here, a
2048×256×1024 bf16 matmul runs at ~1,200 GFLOP/s that way against ~130 GFLOP/s with a
bf16 result, and ~170 GFLOP/s in float32. Autodiff of such an einsum would hand its
backward dots a float32 cotangent and a bfloat16 operand, which XLA upcasts to float32,
so the gradient matmuls would lose the speed-up. `einsum` therefore has its own VJP that
casts the cotangent to the operand dtype and runs both gradient dots with float32
accumulation as well.

The same VJP serves float32, for a layout reason: when the second operand is a weight (it
shares no index with both the first operand and the output, e.g. "BTD,DF->BTF"), autodiff
writes its gradient as the dot "BTD,BTF->DF", contracting the long B·T axis of both
operands, and XLA:CPU then transposes the whole (B·T, F) cotangent first. Computing the
gradient as "BTF,BTD->FD" and transposing the small (F, D) result instead is faster, most
for the output projection (measured here on 2048×256×8000: 44 ms instead of 54 ms, plus
a 60 ms transpose of the cotangent avoided inside the train step; benchmarks/README.md).
The forward pass is plain `jnp.einsum` for float32.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

Array = jnp.ndarray


def einsum(spec: str, a: Array, b: Array, *, out_dtype: jnp.dtype | None = None) -> Array:
    """`jnp.einsum(spec, a, b)` with float32 accumulation for low-precision operands.

    Args:
      spec: a two-operand spec without ellipses, e.g. "BTD,DF->BTF". Every index of an
        operand must appear in the other operand or the output (true of all matmuls),
        so that both gradients are einsums too.
      a, b: operands of the same dtype.
      out_dtype: result dtype; defaults to the operands' dtype (float32 logits from
        bfloat16 activations pass `out_dtype=jnp.float32`).
    """
    if a.dtype != b.dtype:
        raise TypeError(f"einsum operands differ in dtype: {a.dtype} vs {b.dtype}; cast first.")
    out_dtype = jnp.dtype(out_dtype or a.dtype)
    if a.dtype == jnp.float64:
        return jnp.einsum(spec, a, b).astype(out_dtype)  # references and tests: autodiff
    _check_spec(spec)
    a, b = _match_varying(a, b)
    return _mixed_einsum(spec, out_dtype, a, b)


def _varying_axes(x: Array) -> frozenset:
    """The `shard_map` mesh axes along which `x` varies (empty outside shard_map)."""
    manual = getattr(jax.typeof(x), "manual_axis_type", None)
    return frozenset(manual.varying) if manual is not None else frozenset()


def _match_varying(a: Array, b: Array) -> tuple[Array, Array]:
    """Give both operands the union of their varying mesh axes before the custom VJP.

    Inside `shard_map` (check_vma=True) a replicated weight times a per-device activation
    has a per-device gradient, which a custom VJP may not return for a replicated input.
    Casting the weight to varying first (`pcast`) makes autodiff insert the psum over
    devices itself, in the transpose of the cast: exactly the gradient of plain einsum.
    """
    va, vb = _varying_axes(a), _varying_axes(b)
    if vb - va:
        a = jax.lax.pcast(a, tuple(sorted(vb - va)), to="varying")
    if va - vb:
        b = jax.lax.pcast(b, tuple(sorted(va - vb)), to="varying")
    return a, b


def _check_spec(spec: str) -> None:
    ins, out = spec.split("->")
    lhs, rhs = ins.split(",")
    for name, term, others in (("first", lhs, rhs + out), ("second", rhs, lhs + out)):
        lonely = [i for i in term if i not in others]
        if lonely:
            raise ValueError(
                f"einsum {spec!r}: index {lonely} of the {name} operand is summed away "
                "within that operand alone; reduce it before the einsum."
            )


def _dot(spec: str, a: Array, b: Array, out_dtype: jnp.dtype) -> Array:
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32).astype(out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _mixed_einsum(spec: str, out_dtype: jnp.dtype, a: Array, b: Array) -> Array:
    return _dot(spec, a, b, out_dtype)


def _fwd(spec, out_dtype, a, b):
    return _dot(spec, a, b, out_dtype), (a, b)


def _weight_gradient_order(lhs: str, rhs: str, out: str) -> str | None:
    """For a weight-like second operand, its indices as (output side, then input side).

    "BTD,DF->BTF" gives "FD": the gradient is then the dot "BTF,BTD->FD", a plain GEMM on
    row-major operands. None when `rhs` shares an index with both `lhs` and `out` (a batch
    index, as in attention's "BHTK,BHSK->BHTS"): autodiff's own order is kept there.
    """
    if any(i in lhs and i in out for i in rhs):
        return None
    return "".join(i for i in out if i in rhs) + "".join(i for i in lhs if i in rhs)


def _bwd(spec, out_dtype, residuals, g):
    a, b = residuals
    (lhs, rhs), out = spec.split("->")[0].split(","), spec.split("->")[1]
    g = g.astype(a.dtype)  # bf16 cotangent: the gradient dots stay on the fast path
    da = _dot(f"{out},{rhs}->{lhs}", g, b, a.dtype)
    order = _weight_gradient_order(lhs, rhs, out)
    if order is None:
        db = _dot(f"{lhs},{out}->{rhs}", a, g, b.dtype)
    else:
        db_t = _dot(f"{out},{lhs}->{order}", g, a, b.dtype)  # (out side, input side)
        db = jnp.transpose(db_t, [order.index(i) for i in rhs])
    return da, db


_mixed_einsum.defvjp(_fwd, _bwd)
