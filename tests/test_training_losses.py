"""Losses and schedules against independent float64 references."""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from transformer_jax.training import losses, optimizer


def reference_smoothed_ce(logits, targets, eps):
    """KL(q || p) per token in float64, q = (1 - ε) one-hot + ε / (V - 1) elsewhere."""
    logits = np.asarray(logits, np.float64)
    log_p = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
    log_p -= logits.max(-1, keepdims=True)
    vocab = logits.shape[-1]
    q = np.full(logits.shape, eps / (vocab - 1))
    np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q_log_q = np.where(q > 0, q * np.log(q), 0.0)
    return (q_log_q - q * log_p).sum(-1)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_smoothed_cross_entropy_matches_float64_kl(eps):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 11)).astype(np.float32) * 3
    targets = rng.integers(0, 11, (3, 5))
    got = losses.smoothed_cross_entropy(jnp.asarray(logits), jnp.asarray(targets), eps)
    np.testing.assert_allclose(got, reference_smoothed_ce(logits, targets, eps), atol=2e-5)


def test_weighted_sums_ignore_padding_and_count_tokens():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 4, 7)).astype(np.float32)
    targets = np.array([[3, 4, 0, 0], [5, 6, 2, 0]])
    weights = (targets > 0).astype(np.float32)
    sums = losses.weighted_loss_sums(logits, targets, weights, 0.1)
    garbage = logits.copy()
    garbage[weights == 0] = 1e4  # whatever the model says at padding does not count
    same = losses.weighted_loss_sums(garbage, targets, weights, 0.1)
    for key in sums:
        np.testing.assert_allclose(same[key], sums[key], rtol=1e-6)
    assert float(sums["weight"]) == 5
    nll = reference_smoothed_ce(logits, targets, 0.0)
    np.testing.assert_allclose(sums["nll"], (nll * weights).sum(), rtol=1e-5)
    hits = (logits.argmax(-1) == targets) * weights
    assert float(sums["correct"]) == hits.sum()


def test_paper_schedule_warms_up_linearly_then_decays_as_inverse_sqrt():
    d, warmup = 512, 4000
    schedule = optimizer.paper_schedule(d, warmup)
    n = np.array([1, 100, 4000, 16000], np.float64)  # the paper counts steps from 1
    expected = d**-0.5 * np.minimum(n**-0.5, n * warmup**-1.5)
    got = np.array([float(schedule(int(k) - 1)) for k in n])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got.argmax() == 2  # the peak is at n = warmup
    np.testing.assert_allclose(got[3] / got[2], 0.5, rtol=1e-6)  # 4x the steps, half the rate


def _config(**overrides):
    from transformer_jax.training import training_defaults

    c = training_defaults()
    c.update(overrides)
    return c


def test_constant_adam_with_clipping_first_update_is_lr_sized():
    tx, schedule = optimizer.make_optimizer(
        _config(schedule="constant", learning_rate=0.005, clip_norm=1.0), model_dim=32
    )
    params = {"w": jnp.ones(3)}
    grads = {"w": jnp.array([100.0, -1.0, 0.5])}
    updates, _ = tx.update(grads, tx.init(params), params)
    # Adam's first step is lr · g / |g| per coordinate (clipping does not change the sign).
    np.testing.assert_allclose(updates["w"], [-0.005, 0.005, -0.005], rtol=1e-4)
    assert float(schedule(1000)) == pytest.approx(0.005)


def test_clipped_adam_matches_a_float64_reference_over_two_steps():
    lr, b1, b2, eps, clip = 0.005, 0.9, 0.999, 1e-8, 1.0
    tx, _ = optimizer.make_optimizer(
        _config(schedule="constant", learning_rate=lr, adam_b2=b2, adam_eps=eps, clip_norm=clip),
        model_dim=32,
    )
    grads = [np.array([30.0, -40.0]), np.array([0.3, 0.4])]  # norms 50 (clipped) and 0.5
    params = {"w": jnp.zeros(2)}
    state = tx.init(params)
    m = v = np.zeros(2)
    for t, g in enumerate(grads, start=1):
        updates, state = tx.update({"w": jnp.asarray(g, jnp.float32)}, state, params)
        g = g * min(1.0, clip / np.linalg.norm(g))
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g**2
        expected = -lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        np.testing.assert_allclose(updates["w"], expected, rtol=1e-4)


def test_unknown_schedule_names_the_choices():
    with pytest.raises(ValueError, match="paper"):
        optimizer.make_schedule(ml_collections.ConfigDict({"schedule": "cosine"}), 8)
