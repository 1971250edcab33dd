"""Masked, token-weighted losses and accuracy: pure functions of arrays.

Each returns *sums* over tokens together with the token weight, never a mean: the data-parallel
step divides by the global weight (summed over devices and micro-batches), so a batch split
over 4 devices, or into micro-batches, gives exactly the same loss as one big batch.

The logits (B, T, V) are the largest activation of a translation model (V ≫ D), so the loss
touches them as few times as possible: the forward pass is reductions only (row max, Σ exp,
Σ logits, the target's logit), never a materialised (B, T, V) log-softmax. Its derivative
comes from one of two rules, as `ops.einsum`'s (`gradients=`): "autodiff" (the default)
lets JAX differentiate the forward, so every transformation works (forward mode, Hessians,
vmap); "custom_vjp", which the train step uses, is a custom VJP whose backward is one
elementwise pass, softmax − q (reverse mode only; its A/B in benchmarks/LOG.md, "Fused
cross-entropy").
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from transformer_jax.ops.matmul import GRADIENTS, check_reverse_mode

Array = jax.Array


def _smoothing(label_smoothing: float, vocab: int) -> tuple[float, float, float]:
    """(confidence, low, normalizer) of q = (1 - ε) on the target, ε / (V - 1) elsewhere.

    normalizer = -Σ q log q, the entropy of q: subtracting it makes a perfect prediction
    score 0, so the value compares with the plain NLL in logs (Flax WMT does the same).
    """
    confidence = 1.0 - label_smoothing
    if label_smoothing == 0.0:
        return confidence, 0.0, 0.0
    low = label_smoothing / (vocab - 1)
    normalizer = -(confidence * math.log(confidence) + (vocab - 1) * low * math.log(low))
    return confidence, low, normalizer


def _row_stats(logits: Array, targets: Array) -> tuple[Array, Array, Array, Array]:
    """Per-token (max, logsumexp, Σ logits, target logit), each (B, T), in float32."""
    z = logits.astype(jnp.float32)
    # The shift cancels in the value; stopping its gradient keeps autodiff from tracing it.
    z_max = jax.lax.stop_gradient(jnp.max(z, axis=-1))  # (B, T)
    lse = z_max + jnp.log(jnp.sum(jnp.exp(z - z_max[..., None]), axis=-1))  # (B, T)
    z_sum = jnp.sum(z, axis=-1)  # (B, T)
    # A gather of B·T values: a masked row sum would materialise a (B, T, V) select.
    z_target = jnp.take_along_axis(z, targets[..., None], axis=-1)[..., 0]  # (B, T)
    return z_max, lse, z_sum, z_target


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _token_losses(
    logits: Array, targets: Array, label_smoothing: float
) -> tuple[Array, Array, Array]:
    return _token_losses_fwd(logits, targets, label_smoothing)[0]


def _token_losses_fwd(logits, targets, label_smoothing):
    vocab = logits.shape[-1]
    confidence, low, normalizer = _smoothing(label_smoothing, vocab)
    z_max, lse, z_sum, z_target = _row_stats(logits, targets)
    nll = lse - z_target  # -log p_target, (B, T)
    # Σ_j -log p_j = V·lse - Σ z; the other V - 1 classes share ε.
    others = vocab * lse - z_sum - nll
    loss = confidence * nll + low * others - normalizer
    correct = (z_target >= z_max).astype(jnp.float32)
    return (loss, nll, correct), (logits, targets, lse)


def _token_losses_bwd(label_smoothing, residuals, cotangents):
    """∂loss/∂z = softmax(z) - q, one elementwise pass; `nll` and `correct` are metrics
    (zero gradient), so their cotangents are not read."""
    logits, targets, lse = residuals
    g_loss = cotangents[0][..., None]  # (B, T, 1)
    confidence, low, _ = _smoothing(label_smoothing, logits.shape[-1])
    p = jnp.exp(logits.astype(jnp.float32) - lse[..., None])  # (B, T, V)
    is_target = jnp.arange(logits.shape[-1], dtype=targets.dtype) == targets[..., None]
    grad = g_loss * (p - jnp.where(is_target, confidence, low))  # (B, T, V)
    return grad.astype(logits.dtype), None


_token_losses.defvjp(_token_losses_fwd, _token_losses_bwd)


def token_losses(
    logits: Array, targets: Array, label_smoothing: float = 0.0, *, gradients: str = "autodiff"
) -> tuple[Array, Array, Array]:
    """Per-token (loss, nll, correct) from one pass over the logits.

    Args:
      logits: (B, T, V), any float dtype (statistics are float32).
      targets: (B, T) int ids in [0, V).
      label_smoothing: ε of Vaswani et al. 2017, §5.4 (ε_ls = 0.1): the loss is the
        cross-entropy against q = (1 - ε) one-hot + ε / (V - 1) elsewhere, minus the
        entropy of q. With ε = 0 it is the plain NLL of d2l §10.7.3's MaskedSoftmaxCELoss.
      gradients: "autodiff" (JAX's rules, every transformation) or "custom_vjp" (the custom
        VJP: one backward pass, reverse mode only); see the module.

    Returns:
      loss (B, T) float32, the objective; nll (B, T) float32, -log p(target);
      correct (B, T) float32, 1 where the target's logit is the row maximum (the argmax,
      counting an exact tie as a hit). Only `loss` is differentiable: `nll` and `correct`
      are metrics and carry no gradient (train on the NLL with label_smoothing=0).
    """
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing!r} is outside [0, 1).")
    if label_smoothing > 0.0 and logits.shape[-1] < 2:
        raise ValueError(
            f"label_smoothing={label_smoothing!r} needs a vocabulary of at least 2 (logits have "
            f"V={logits.shape[-1]}): ε is spread over the other V - 1 classes. Use 0."
        )
    if gradients == "autodiff":
        loss, nll, correct = _token_losses_fwd(logits, targets, float(label_smoothing))[0]
        return loss, jax.lax.stop_gradient(nll), correct  # nll: a metric, as under "custom_vjp"
    if gradients != "custom_vjp":
        raise ValueError(f"gradients={gradients!r}: choose one of {list(GRADIENTS)}.")
    check_reverse_mode("token_losses", logits)
    return _token_losses(logits, targets, float(label_smoothing))


def smoothed_cross_entropy(logits: Array, targets: Array, label_smoothing: float = 0.0) -> Array:
    """Per-token label-smoothed cross-entropy, logits (B, T, V), targets (B, T) -> (B, T)."""
    return token_losses(logits, targets, label_smoothing)[0]


def weighted_loss_sums(
    logits: Array,
    targets: Array,
    weights: Array,
    label_smoothing: float = 0.0,
    *,
    gradients: str = "autodiff",
) -> dict[str, Array]:
    """Token-weighted sums for one batch; weights (B, T) are 1 on real tokens, 0 on padding.

    Returns scalars: `loss` (label-smoothed CE sum, the objective), `nll` (plain CE sum),
    `correct` (argmax hits), `weight` (number of counted tokens).
    """
    weights = weights.astype(jnp.float32)
    loss, nll, correct = token_losses(
        logits, targets, label_smoothing, gradients=gradients
    )  # (B, T) each
    return {
        "loss": jnp.sum(loss * weights),
        "nll": jnp.sum(nll * weights),
        "correct": jnp.sum(correct * weights),
        "weight": jnp.sum(weights),
    }
