"""Two-operand einsum that runs low-precision inputs on the fast path, forward and backward.

On CPUs with AMX/AVX512-BF16 (and on TPU) a bfloat16 matmul is fast only when it
accumulates in float32 (`preferred_element_type=float32`): measured here, a
2048×256×1024 bf16 matmul runs at ~1,200 GFLOP/s that way against ~130 GFLOP/s with a
bf16 result, and ~170 GFLOP/s in float32. Autodiff of such an einsum would hand its
backward dots a float32 cotangent and a bfloat16 operand, which XLA upcasts to float32,
so the gradient matmuls would lose the speed-up. `einsum` therefore has its own VJP that
casts the cotangent to the operand dtype and runs both gradient dots with float32
accumulation as well.

Float32 operands take plain `jnp.einsum` (the reference path, bit-for-bit unchanged),
except batched dots (attention's QKᵀ and weights·V), whose VJP is also ours: XLA:CPU runs
a batched dot fast only when its left operand contracts its minor axis, and two of
the four attention gradients (dK = dSᵀ·Q, dV = Wᵀ·dO) contract their left operand's
row axis. Measured here, one (256 × 10×10 @ 10×8) such dot took 367 µs, against 139 µs
after an explicit transpose of the left operand; at the `small` sizes (256 × 32×32 @
32×64) 857 µs against 638 µs. The transpose sits behind an `optimization_barrier`,
because XLA would otherwise fold it back into the dot's dimension numbers.

A custom VJP has no forward mode: `jax.jvp`/`jax.jacfwd` through attention or bfloat16
einsums raise. Reverse mode differentiates the VJP itself, so Hessian-vector products
work as `jax.grad` of `jnp.vdot(jax.grad(f)(x), v)` (tested).
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
    if (a.dtype == jnp.float32 or a.dtype == jnp.float64) and not _batch_indices(spec):
        return jnp.einsum(spec, a, b).astype(out_dtype)
    _check_spec(spec)
    a, b = _match_varying(a, b)
    return _einsum(spec, out_dtype, a, b)


def _batch_indices(spec: str) -> str:
    """Indices shared by both operands and the output ("BH" of "BHTK,BHSK->BHTS")."""
    (lhs, rhs), out = spec.split("->")[0].split(","), spec.split("->")[1]
    return "".join(i for i in lhs if i in rhs and i in out)


def _varying_axes(x: Array) -> frozenset:
    """The `shard_map` mesh axes along which `x` varies (empty outside shard_map)."""
    manual = getattr(jax.typeof(x), "manual_axis_type", None)
    return frozenset(manual.varying) if manual is not None else frozenset()


def _match_varying(a: Array, b: Array) -> tuple[Array, Array]:
    """Give both operands the union of their varying mesh axes before the custom VJP.

    Inside `shard_map` (check_vma=True) a replicated weight times a per-device activation
    has a per-device gradient, which a custom VJP may not return for a replicated input
    (JAX raises a type error). Casting the weight to varying first (`pcast`) makes autodiff
    insert the psum over devices itself, in the transpose of the cast: exactly the
    gradient plain `jnp.einsum` gets.
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
    if a.dtype == jnp.float32 or a.dtype == jnp.float64:
        return jnp.einsum(spec, a, b).astype(out_dtype)
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32).astype(out_dtype)


def _gradient_dot(spec: str, x: Array, y: Array, out_dtype: jnp.dtype) -> Array:
    """A gradient einsum, for batched dots laid out the way XLA:CPU runs them fast.

    The operand whose free indices lead the output goes on the left (so the result needs
    no transpose), and its contracted indices are made minor by an explicit transpose
    (dV = Wᵀ·dO becomes "BHST,BHTK->BHSK" on a transposed W). Unbatched dots, such as
    weight gradients, are left to XLA.
    """
    if not _batch_indices(spec):
        return _dot(spec, x, y, out_dtype)
    (lhs, rhs), out = spec.split("->")[0].split(","), spec.split("->")[1]
    if next(i for i in out if i not in rhs or i not in lhs) not in lhs:
        (lhs, x), (rhs, y) = (rhs, y), (lhs, x)
    batch = "".join(i for i in lhs if i in rhs and i in out)
    order = batch + "".join(i for i in lhs if i in out and i not in batch)
    order += "".join(i for i in lhs if i not in out)
    if order != lhs:
        # Behind a barrier: XLA would fold a bare transpose back into the dot.
        x = jax.lax.optimization_barrier(jnp.transpose(x, [lhs.index(i) for i in order]))
    return _dot(f"{order},{rhs}->{out}", x, y, out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _einsum(spec: str, out_dtype: jnp.dtype, a: Array, b: Array) -> Array:
    return _dot(spec, a, b, out_dtype)


def _fwd(spec, out_dtype, a, b):
    return _dot(spec, a, b, out_dtype), (a, b)


def _bwd(spec, out_dtype, residuals, g):
    a, b = residuals
    (lhs, rhs), out = spec.split("->")[0].split(","), spec.split("->")[1]
    g = g.astype(a.dtype)  # bf16 cotangent: the gradient dots stay on the fast path
    da = _gradient_dot(f"{out},{rhs}->{lhs}", g, b, a.dtype)
    db = _gradient_dot(f"{lhs},{out}->{rhs}", a, g, b.dtype)
    return da, db


_einsum.defvjp(_fwd, _bwd)
