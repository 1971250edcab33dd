"""Losses and schedules against independent float64 references."""

from __future__ import annotations

import jax
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


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_decay_schedules_warm_up_to_the_peak_and_reach_zero_at_the_last_step(kind):
    peak, warmup, total = 3e-3, 100, 1100
    schedule = optimizer.make_schedule(
        _config(schedule=kind, learning_rate=peak, warmup_steps=warmup, num_train_steps=5),
        model_dim=64,
        total_steps=total,  # the run's resolved length wins over num_train_steps
    )
    lr = lambda n: float(schedule(n))
    assert lr(0) == 0.0 and lr(50) == pytest.approx(peak / 2, rel=1e-5)
    assert lr(warmup) == pytest.approx(peak, rel=1e-5)
    middle = warmup + (total - warmup) // 2  # linear: half the peak; cosine: (1 + cos π/2)/2
    assert lr(middle) == pytest.approx(peak / 2, rel=1e-4)
    assert lr(warmup + (total - warmup) // 4) == pytest.approx(
        peak * (0.75 if kind == "linear" else (1 + np.cos(np.pi / 4)) / 2), rel=1e-4
    )
    assert lr(total) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="decays to 0 at the last step"):
        optimizer.make_schedule(_config(schedule=kind, num_train_steps=0), model_dim=64)


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
        optimizer.make_schedule(ml_collections.ConfigDict({"schedule": "exponential"}), 8)


def reference_smoothed_ce_grad(logits, targets, eps, g_loss):
    """d(Σ g_loss·loss)/d logits in float64: g_loss·(p - q)."""
    logits = np.asarray(logits, np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    vocab = logits.shape[-1]
    q = np.full(logits.shape, eps / (vocab - 1))
    np.put_along_axis(q, targets[..., None], 1.0 - eps, axis=-1)
    return g_loss[..., None] * (p - q)


@pytest.mark.parametrize("gradients", ["custom_vjp", "autodiff"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_token_losses_gradient_matches_float64_reference(eps, gradients):
    """The hand-written VJP (softmax - q in one pass) and JAX's derivative of the forward,
    against the analytic float64 gradient and against autodiff through an explicit
    log-softmax; nll and correct carry none."""
    rng = np.random.default_rng(2)
    logits = (rng.normal(size=(2, 3, 13)) * 4).astype(np.float32)
    targets = rng.integers(0, 13, (2, 3))
    g_loss = rng.normal(size=(2, 3))

    def objective(z, which=0):
        out = losses.token_losses(z, jnp.asarray(targets), eps, gradients=gradients)
        return jnp.sum(out[which] * g_loss)

    got = jax.grad(objective)(jnp.asarray(logits))
    np.testing.assert_allclose(
        got, reference_smoothed_ce_grad(logits, targets, eps, g_loss), atol=2e-6
    )

    def autodiff(z):  # the textbook formula, label smoothing over the other V - 1 classes
        log_p = jax.nn.log_softmax(z, axis=-1)
        nll = -jnp.take_along_axis(log_p, jnp.asarray(targets)[..., None], -1)[..., 0]
        others = -jnp.sum(log_p, axis=-1) - nll
        return jnp.sum(((1 - eps) * nll + eps / 12 * others) * g_loss)

    np.testing.assert_allclose(got, jax.grad(autodiff)(jnp.asarray(logits)), atol=2e-6)
    for metric in (1, 2):
        assert not np.any(jax.grad(objective)(jnp.asarray(logits), metric))


def test_token_losses_bfloat16_logits_and_ties():
    """bfloat16 logits give a float32 loss close to the float32 one and a bfloat16 gradient;
    `correct` is the argmax hit, with an exact tie for the maximum counted as a hit."""
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(4, 9)).astype(np.float32)[None]
    targets = np.asarray(rng.integers(0, 9, (1, 4)))
    full = losses.token_losses(jnp.asarray(logits), targets, 0.1)
    half = losses.token_losses(jnp.asarray(logits, jnp.bfloat16), targets, 0.1)
    assert half[0].dtype == jnp.float32
    np.testing.assert_allclose(half[0], full[0], atol=3e-2)
    grad = jax.grad(lambda z: jnp.sum(losses.token_losses(z, targets, 0.1)[0]))
    assert grad(jnp.asarray(logits, jnp.bfloat16)).dtype == jnp.bfloat16
    np.testing.assert_array_equal(full[2], (logits.argmax(-1) == targets).astype(np.float32))
    tied = np.zeros((1, 1, 5), np.float32)
    tied[0, 0, [1, 3]] = 2.0
    _, _, correct = losses.token_losses(jnp.asarray(tied), np.array([[3]]), 0.0)
    assert float(correct[0, 0]) == 1.0
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.token_losses(jnp.asarray(tied), np.array([[3]]), 1.0)
    with pytest.raises(ValueError, match="vocabulary of at least 2"):
        losses.token_losses(jnp.zeros((1, 1, 1)), np.array([[0]]), 0.1)
