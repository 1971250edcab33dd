"""The per-device train and eval steps, written once for one device with a named axis.

How they are mapped over devices (`jax.pmap` or `jax.jit(jax.shard_map(...))`) is chosen
in `parallel.py`. Both steps are pure functions `(state, batch) -> (state, metrics)`, so a
later change can `lax.scan` several of them in one call.

Batch leaves on one device: src (B, S) int32, src_len (B,) int32, tgt_in / tgt_out (B, T)
int32, tgt_weight (B, T) float32 (0 on padding and on padded rows); a batch of packed rows
(data/packing.py) also has src_segment / src_position (B, S) and tgt_segment / tgt_position
(B, T) int32 (`nn.Packing`).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax
from jax import lax

from transformer_jax.nn import ModelConfig, Packing, Transformer
from transformer_jax.runtime import backend
from transformer_jax.training.losses import weighted_loss_sums
from transformer_jax.training.state import TrainState

Batch = dict[str, jax.Array]
Metrics = dict[str, jax.Array]


def step_kwargs(
    config: ml_collections.ConfigDict,
    model_config: ModelConfig,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
) -> dict[str, Any]:
    """Keyword arguments binding `train_step` / `train_steps` to a run config.

    The model takes the run config's `gradients` rule, "auto" resolved for the backend in use
    (`runtime.backend.GRADIENTS`; the step runs reverse mode only, where "custom_vjp" works);
    `train_step` gives the loss the model's rule.
    """
    platform = backend.platform_name(jax.default_backend())
    gradients = backend.resolve(backend.GRADIENTS, config.gradients, platform)
    return dict(
        model=Transformer(model_config.replace(gradients=gradients)),
        tx=tx,
        schedule=schedule,
        label_smoothing=config.label_smoothing,
        grad_accum_steps=config.grad_accum_steps,
    )


def _logits(model: nn.Module, params, batch: Batch, rng: jax.Array | None) -> jax.Array:
    rngs = None if rng is None else {"dropout": rng}
    packing = Packing.from_batch(batch)  # several pairs a row, or None
    return model.apply(
        {"params": params}, batch["src"], batch["src_len"], batch["tgt_in"], packing, rngs=rngs
    )  # (B, T, V)


def train_step(
    state: TrainState,
    batch: Batch,
    *,
    model: nn.Module,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    label_smoothing: float,
    grad_accum_steps: int,
    axis_name: str,
) -> tuple[TrainState, Metrics]:
    """One optimizer update from this device's share of the global batch.

    The objective is Σ_tokens w·CE / Σ_tokens w over the *global* batch: each device
    contributes its token sum, divided by the global token count, so the result does not
    depend on how the batch is split over devices or micro-batches.

    Gradient reduction works under both mappings: in `pmap` the transpose of `psum` is a
    `psum`, so each device holds n·∂(local)/W and `pmean` averages them; in `shard_map`
    (check_vma=True) the gradient of the replicated params is already summed over devices,
    and `pmean` of an unvarying value is the identity. On a single device the reduction is
    skipped (`_average_over_devices`).

    Returns the new state and psum'd metric sums (loss, nll, correct, weight) plus
    grad_norm and learning_rate: identical on every device.
    """
    step_rng = jax.random.fold_in(state.rng, state.step)
    step_rng = jax.random.fold_in(step_rng, lax.axis_index(axis_name))
    total_weight = jnp.maximum(lax.psum(jnp.sum(batch["tgt_weight"]), axis_name), 1.0)

    def loss_fn(params, micro: Batch, rng: jax.Array):
        logits = _logits(model, params, micro, rng)
        sums = weighted_loss_sums(
            logits,
            micro["tgt_out"],
            micro["tgt_weight"],
            label_smoothing,
            gradients=model.config.gradients,
        )
        sums = lax.psum(sums, axis_name)  # global sums: the same on every device
        return sums["loss"] / total_weight, sums

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if grad_accum_steps == 1:
        (_, sums), grads = grad_fn(state.params, batch, step_rng)
    else:
        # (B, ...) -> (A, B / A, ...): scan over micro-batches, summing gradients and sums.
        micro = jax.tree.map(lambda x: x.reshape((grad_accum_steps, -1) + x.shape[1:]), batch)

        def accumulate(carry, xs):
            grads_acc, sums_acc = carry
            micro_batch, index = xs
            (_, sums), grads = grad_fn(
                state.params, micro_batch, jax.random.fold_in(step_rng, index)
            )
            grads_acc = jax.tree.map(jnp.add, grads_acc, grads)
            return (grads_acc, jax.tree.map(jnp.add, sums_acc, sums)), None

        zeros = jax.tree.map(jnp.zeros_like, state.params)
        zero_sums = {k: jnp.zeros((), jnp.float32) for k in ("loss", "nll", "correct", "weight")}
        (grads, sums), _ = lax.scan(
            accumulate, (zeros, zero_sums), (micro, jnp.arange(grad_accum_steps))
        )
    grads = _average_over_devices(grads, axis_name)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {
        **sums,
        "grad_norm": optax.tree.norm(grads),
        "learning_rate": jnp.asarray(schedule(state.step), jnp.float32),
    }
    new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
    return new_state, metrics


def _average_over_devices(grads: Any, axis_name: str) -> Any:
    """`lax.pmean(grads, axis_name)`, skipped when the axis has one device.

    Over one device the mean is the identity, but XLA:CPU still runs the all-reduce as a
    copy of every gradient and then scales each by 1/1: at `base` (69M parameters) 40 ms
    plus 46 ms of op time per step, and the step ran 2,259 -> 2,136 ms in turns
    (benchmarks/LOG.md).
    """
    if lax.axis_size(axis_name) == 1:
        return grads
    return lax.pmean(grads, axis_name)


def train_steps(state: TrainState, batches: Batch, **step_kwargs) -> tuple[TrainState, Metrics]:
    """N optimizer steps in one call: `lax.scan` of `train_step` over batches (N, B, ...).

    The same computation as N calls of `train_step` (dropout keys come from the state's
    step counter), without N dispatches. Metrics come back stacked, each (N,).
    """
    return lax.scan(lambda s, b: train_step(s, b, **step_kwargs), state, batches)


def eval_step(params, batch: Batch, *, model: nn.Module, axis_name: str) -> Metrics:
    """Global sums of nll, correct and weight over this eval batch (model without dropout)."""
    logits = _logits(model, params, batch, None)
    sums = weighted_loss_sums(logits, batch["tgt_out"], batch["tgt_weight"], 0.0)
    return lax.psum(sums, axis_name)
