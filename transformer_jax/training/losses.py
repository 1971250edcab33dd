"""Masked, token-weighted losses and accuracy: pure functions of arrays.

Each returns *sums* over tokens together with the token weight, never a mean: the data-parallel
step divides by the global weight (summed over devices and micro-batches), so a batch split
over 4 devices, or into micro-batches, gives exactly the same loss as one big batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def smoothed_cross_entropy(logits: Array, targets: Array, label_smoothing: float = 0.0) -> Array:
    """Per-token cross-entropy against label-smoothed one-hot targets.

    logits (B, T, V) float32, targets (B, T) int -> (B, T) float32.

    Label smoothing (Vaswani et al. 2017, §5.4, ε_ls = 0.1) spreads ε over the other V - 1
    classes: q = (1 - ε) on the target, ε / (V - 1) elsewhere. We subtract the entropy of q
    (its minimum) so that a perfect prediction scores 0 and the value is comparable to the
    plain NLL in logs (Flax WMT does the same). With ε = 0 this is the plain NLL of d2l
    §10.7.3's MaskedSoftmaxCELoss.
    """
    vocab = logits.shape[-1]
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # (B, T, V)
    nll = -jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]  # (B, T)
    if label_smoothing == 0.0:
        return nll
    confidence = 1.0 - label_smoothing
    low = label_smoothing / (vocab - 1)
    # Sum over all classes of -log p, minus the target's own share: (B, T).
    others = -jnp.sum(log_probs, axis=-1) - nll
    loss = confidence * nll + low * others
    normalizer = -(confidence * jnp.log(confidence) + (vocab - 1) * low * jnp.log(low + 1e-20))
    return loss - normalizer


def weighted_loss_sums(
    logits: Array, targets: Array, weights: Array, label_smoothing: float = 0.0
) -> dict[str, Array]:
    """Token-weighted sums for one batch; weights (B, T) are 1 on real tokens, 0 on padding.

    Returns scalars: `loss` (label-smoothed CE sum, the objective), `nll` (plain CE sum),
    `correct` (argmax hits), `weight` (number of counted tokens).
    """
    weights = weights.astype(jnp.float32)
    nll = smoothed_cross_entropy(logits, targets, 0.0)  # (B, T)
    loss = (
        nll if label_smoothing == 0.0 else smoothed_cross_entropy(logits, targets, label_smoothing)
    )
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)  # (B, T)
    return {
        "loss": jnp.sum(loss * weights),
        "nll": jnp.sum(nll * weights),
        "correct": jnp.sum(correct * weights),
        "weight": jnp.sum(weights),
    }
