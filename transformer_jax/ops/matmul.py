"""Two-operand einsum with a choice of derivative rules: JAX's own, or a custom VJP's.

Every matmul of the model goes through `einsum`, those with a weight through `dense` (the
casts to and from the compute dtype around it). `einsum`'s forward is `jnp.einsum` (float32
accumulation for low-precision operands, see below). Its derivatives come from one of two
rules, `gradients=`:

- "autodiff" (the default, `ModelConfig.gradients`): JAX differentiates the forward, so
  every transformation works: `jax.jvp`, `jax.jacfwd`, `jax.linearize`, `jax.grad`,
  Hessian-vector products in either order, `jax.vmap`, `jax.checkpoint`
  (tests/test_transformations.py).
- "custom_vjp": a custom VJP whose backward computes the two gradient einsums itself, in the
  layouts XLA:CPU runs fast and in the operands' dtype. Reverse mode only: `jax.grad`,
  `jax.vjp`, and Hessian-vector products built from them (reverse-over-reverse,
  forward-over-reverse), under `vmap` and `checkpoint` too. Forward mode raises:
  `jax.jvp` and `jax.jacfwd` a `ForwardModeError` naming the fix, `jax.linearize`'s
  linear function JAX's own error. The train step uses it (run-config key `gradients`,
  `training/config.py`), where only reverse mode runs.

JAX has no public way to give one function both a forward-mode rule and a custom transpose
that survives higher-order differentiation and `vmap` (`custom_jvp` + `custom_vjp` cannot
be combined; `jax.custom_derivatives.linear_call` has no batching rule and no derivative in
its residuals), hence the switch.

Why a custom VJP. Layout: XLA:CPU runs a dot fast when the left operand's contracted axes are
minor; otherwise XLA transposes an operand first, and in autodiff's gradients it often
picks the large one (the (B·T, V) logits gradient for the output weights' gradient;
attention's dK = dSᵀ·Q and dV = Wᵀ·dO as per-batch loops). `_gradient_dot` orders the
operands to transpose the fewest elements and transposes explicitly, behind an
`optimization_barrier` (XLA would fold a bare transpose back into the dot). Precision: on
CPUs with AMX/AVX512-BF16 (and on TPU) a bfloat16 matmul is fast only when it accumulates
in float32 (`preferred_element_type=float32`); the VJP casts the float32 cotangent to the
operand dtype and accumulates in float32 as well. Step times with and without:
benchmarks/README.md ("Numbers behind the runtime knobs") and benchmarks/LOG.md.

Both rules run the derivative matmuls of bfloat16 operands in bfloat16 (float32
accumulation): JAX's plain rule would hand them a float32 cotangent, and XLA would upcast
the bfloat16 operand to meet it, so every backward matmul of a bfloat16 train step ran in
float32 (TF32 on a GPU). "autodiff" gets this from a JVP rule (`_low_precision_dot`), which
keeps every transformation; float32 and float64 operands keep JAX's own rule.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

Array = jnp.ndarray


GRADIENTS = ("autodiff", "custom_vjp")


class ForwardModeError(TypeError):
    """Forward-mode autodiff reached an einsum with the reverse-mode-only "custom_vjp" rule."""


def einsum(
    spec: str,
    a: Array,
    b: Array,
    *,
    out_dtype: jnp.dtype | None = None,
    gradients: str = "autodiff",
) -> Array:
    """`jnp.einsum(spec, a, b)`, float32-accumulating for low-precision operands.

    Args:
      spec: a two-operand spec without ellipses, e.g. "BTD,DF->BTF". Every index of an
        operand must appear in the other operand or the output (true of all matmuls),
        so that both gradients are einsums too.
      a, b: operands of the same dtype.
      out_dtype: result dtype; defaults to the operands' dtype (float32 logits from
        bfloat16 activations pass `out_dtype=jnp.float32`).
      gradients: "autodiff" (JAX's rules: every transformation) or "custom_vjp" (the custom
        VJP: reverse mode only, faster gradient matmuls on XLA:CPU); see the module.
    """
    if a.dtype != b.dtype:
        raise TypeError(f"einsum operands differ in dtype: {a.dtype} vs {b.dtype}; cast first.")
    out_dtype = jnp.dtype(out_dtype or a.dtype)
    _check_spec(spec)
    if gradients == "autodiff":
        return _dot(spec, a, b, out_dtype)
    if gradients != "custom_vjp":
        raise ValueError(f"einsum gradients={gradients!r}: choose one of {list(GRADIENTS)}.")
    check_reverse_mode(f"einsum {spec!r}", a, b)
    a, b = _match_varying(a, b)
    return _einsum(spec, out_dtype, a, b)


def dense(
    spec: str,
    x: Array,
    w: Array,
    bias: Array | None = None,
    *,
    dtype: jnp.dtype,
    out_dtype: jnp.dtype | None = None,
    gradients: str = "autodiff",
) -> Array:
    """The model's mixed-precision matmul with a weight: `einsum(spec, x, w) + bias`.

    x and the weight (kept in float32) are cast to the compute `dtype`; the product
    accumulates in float32, the float32 bias is added before rounding, and the result is
    cast once, to `out_dtype`. Every weight of the model is applied here: through
    `nn.Einsum` (the attention projections, the untied output), the FFN
    (`position_wise_ffn`), the tied output (`nn.Embed.attend`) and the additive scorer.

    Args:
      spec: a two-operand spec, input then weight, e.g. "BTD,DHK->BHTK".
      x: the input, any float dtype.
      w: the weight.
      bias: None, or the bias over the weight's output axes (`bias_axes(spec)`, e.g. (H, K)
        for "BTD,DHK->BHTK"), broadcast over the others.
      dtype: the compute dtype of the matmul.
      out_dtype: the result's dtype, `dtype` by default; float32 for logits, and for an
        activation that should see the sum before rounding (the FFN's).
      gradients: the derivative rule of the matmul, "autodiff" or "custom_vjp" (`einsum`).
    """
    y = einsum(spec, x.astype(dtype), w.astype(dtype), out_dtype=jnp.float32, gradients=gradients)
    if bias is not None:
        out = spec.split("->")[1]
        axes = bias_axes(spec)
        y = y + jnp.expand_dims(bias, [i for i, name in enumerate(out) if name not in axes])
    return y.astype(out_dtype or dtype)


def bias_axes(spec: str) -> str:
    """The weight's output axes, in output order: "BTD,DHK->BHTK" -> "HK" (a bias's axes)."""
    (x, w), out = spec.split("->")[0].split(","), spec.split("->")[1]
    return "".join(i for i in out if i in w and i not in x)


def check_reverse_mode(what: str, *operands) -> None:
    """Raises ForwardModeError if forward-mode autodiff is tracing `operands` right here.

    Best effort, so that the user reads the fix instead of JAX's "can't apply forward-mode
    autodiff (jvp) to a custom_vjp function" (raised only when the program is lowered,
    under jit): an operand traced by `jax.jvp`, where no operand is traced by reverse
    mode's linearization. Forward mode hidden under another transformation (`jax.jvp` of
    a `vmap`) still ends in JAX's own error.
    """
    if _JVPTracer is None:  # pragma: no cover - private module moved
        return
    if any(isinstance(x, _JVPTracer) for x in operands) and not any(
        isinstance(x, _LinearizeTracer) for x in operands
    ):
        raise ForwardModeError(FORWARD_MODE_HINT.format(what=what))


try:  # private JAX classes, used only to word an error; guarded in case they move
    from jax._src.interpreters.ad import JVPTracer as _JVPTracer
    from jax._src.interpreters.ad import LinearizeTracer as _LinearizeTracer
except ImportError:  # pragma: no cover
    _JVPTracer = _LinearizeTracer = None


FORWARD_MODE_HINT = (
    "{what}: forward-mode autodiff (jax.jvp, jax.jacfwd) reached the "
    'reverse-mode-only gradients="custom_vjp" rule. Build the model with '
    'ModelConfig(gradients="autodiff") (the default; a run config\'s gradients="autodiff" '
    "for the train step), which supports every JAX transformation."
)


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
    return _low_precision_dot(spec, out_dtype, a, b)


def _accumulated_dot(spec: str, out_dtype: jnp.dtype, a: Array, b: Array) -> Array:
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32).astype(out_dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _low_precision_dot(spec: str, out_dtype: jnp.dtype, a: Array, b: Array) -> Array:
    """A low-precision (bfloat16) matmul accumulated in float32, whose derivative matmuls
    run in the operands' dtype.

    JAX's own rule differentiates `einsum(a, b, preferred_element_type=float32)` with a
    float32 tangent or cotangent, and its dots upcast the bfloat16 operand to meet it: in a
    bfloat16 train step every backward matmul ran in float32 (TF32 on a GPU: half the
    bfloat16 rate, twice the bytes; benchmarks/README.md, "GPU results"). Here the tangent
    products are bfloat16 x bfloat16 dots with a bfloat16 result (the backend accumulates
    in float32 and rounds once), so their transposes, the backward matmuls, are too: the
    mixed-precision convention of torch autocast and Flax, and what the custom VJP computes.
    The forward is unchanged (float32 accumulation and result), and being a JVP rule it
    keeps every transformation: jvp, linearize, grad, HVPs, vmap, checkpoint
    (tests/test_transformations.py).
    """
    return _accumulated_dot(spec, out_dtype, a, b)


@functools.partial(_low_precision_dot.defjvp, symbolic_zeros=True)
def _low_precision_dot_jvp(spec, out_dtype, primals, tangents):
    a, b = primals
    ta, tb = tangents
    # The primal through the rule again: a second derivative (HVPs) meets this rule too.
    out = _low_precision_dot(spec, out_dtype, a, b)
    # JAX calls the rule only when some tangent is nonzero. The products are summed in
    # float32, then rounded once, to the result's dtype.
    parts = [
        jnp.einsum(spec, *operands, preferred_element_type=a.dtype).astype(jnp.float32)
        for operands, tangent in (((ta, b), ta), ((a, tb), tb))
        if not isinstance(tangent, SymbolicZero)
    ]
    return out, sum(parts[1:], parts[0]).astype(out_dtype)


def _gradient_dot(spec: str, x: Array, y: Array, out_dtype: jnp.dtype) -> Array:
    """A gradient einsum laid out the way XLA:CPU runs it fast.

    XLA:CPU's dots want the left operand's contracted indices minor; otherwise XLA
    transposes an operand itself, and it may pick the large one (the (B·T, V) logits
    gradient). So: of the two operand orders, take
    the one that transposes the fewest elements, counting the left operand (made
    contracted-minor here, behind a barrier) and the result (when the dot's natural
    output order is not `out`), and transpose explicitly.
    """
    (lhs, rhs), out = spec.split("->")[0].split(","), spec.split("->")[1]
    options = [(lhs, x, rhs, y), (rhs, y, lhs, x)]
    lhs, x, rhs, y = min(options, key=lambda o: _transposed_elements(*o, out))
    order = _contract_minor_order(lhs, rhs, out)
    if order != lhs:
        # Behind a barrier: XLA would fold a bare transpose back into the dot.
        x = jax.lax.optimization_barrier(jnp.transpose(x, [lhs.index(i) for i in order]))
    natural = _natural_out(order, rhs, out)
    result = _dot(f"{order},{rhs}->{natural}", x, y, out_dtype)
    if natural == out:
        return result
    # The dot in its natural order, then the result transposed, again behind a barrier:
    # asked for `out` directly, XLA swaps the operands to produce it and transposes the
    # other one instead (the (B·T, V) logits gradient for the tied output's "VD").
    result = jax.lax.optimization_barrier(result)
    return jnp.transpose(result, [natural.index(i) for i in out])


def _natural_out(order: str, rhs: str, out: str) -> str:
    """The output order of a dot whose left operand is in `order` (batch, kept, contracted):
    batch, the left operand's kept indices, then the right operand's."""
    kept_left = "".join(i for i in order if i in out)
    return kept_left + "".join(i for i in rhs if i in out and i not in kept_left)


def _contract_minor_order(lhs: str, rhs: str, out: str) -> str:
    """The left operand's indices as batch, kept, then contracted ("BHTS" -> "BHST" for dV)."""
    batch = [i for i in lhs if i in rhs and i in out]
    kept = [i for i in lhs if i in out and i not in batch]
    return "".join(batch + kept + [i for i in lhs if i not in out])


def _transposed_elements(lhs: str, x: Array, rhs: str, y: Array, out: str) -> int:
    """Elements transposed when `lhs,rhs->out` runs with the left operand contracted-minor."""
    order = _contract_minor_order(lhs, rhs, out)
    natural = _natural_out(order, rhs, out)
    sizes = dict(zip(lhs, x.shape, strict=True)) | dict(zip(rhs, y.shape, strict=True))
    cost = x.size if order != lhs else 0
    return cost + (math.prod(sizes[i] for i in out) if natural != out else 0)


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
