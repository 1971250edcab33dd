"""Learning-rate schedules and the optax optimizer, chosen by the run config."""

from __future__ import annotations

import jax.numpy as jnp
import ml_collections
import optax

SCHEDULES = ("paper", "constant", "linear", "cosine")
OPTIMIZERS = ("adam", "adamw")


def paper_schedule(model_dim: int, warmup_steps: int, scale: float = 1.0) -> optax.Schedule:
    """lr = scale · D^-0.5 · min(n^-0.5, n · warmup^-1.5), n = step + 1 (Vaswani et al., §5.3).

    Linear warm-up for `warmup_steps`, then decay with the inverse square root of the step.
    optax counts from 0, the paper from 1: we shift so that the first update has lr > 0.
    """

    def schedule(count):
        n = jnp.asarray(count, jnp.float32) + 1.0
        return scale * model_dim**-0.5 * jnp.minimum(n**-0.5, n * warmup_steps**-1.5)

    return schedule


def decay_schedule(kind: str, peak: float, warmup_steps: int, total_steps: int) -> optax.Schedule:
    """Linear warm-up from 0 to `peak`, then `kind` ("linear" or "cosine") decay to 0 at
    `total_steps`. For a run of known length: the rate reaches 0 exactly when training
    ends, which usually beats the paper's open-ended n^-0.5 decay at a fixed budget."""
    warmup_steps = min(warmup_steps, max(total_steps - 1, 1))
    if kind == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, peak, warmup_steps, total_steps, 0.0)
    return optax.join_schedules(
        [
            optax.linear_schedule(0.0, peak, warmup_steps),
            optax.linear_schedule(peak, 0.0, max(total_steps - warmup_steps, 1)),
        ],
        [warmup_steps],
    )


def make_schedule(
    config: ml_collections.ConfigDict, model_dim: int, total_steps: int | None = None
) -> optax.Schedule:
    """`paper`: `learning_rate` scales the paper's formula (1.0 = the paper).
    `constant`: `learning_rate` is the rate (d2l §11.7.5 uses 0.005).
    `linear` / `cosine`: warm-up to the peak rate `learning_rate`, then decay to 0 at the
    run's last step (`total_steps`, default `num_train_steps`)."""
    if config.schedule == "paper":
        return paper_schedule(model_dim, config.warmup_steps, config.learning_rate)
    if config.schedule == "constant":
        return optax.constant_schedule(config.learning_rate)
    if config.schedule in ("linear", "cosine"):
        steps = total_steps or config.num_train_steps
        if not steps:
            raise ValueError(
                f"schedule={config.schedule!r} decays to 0 at the last step, which is unknown "
                "here: pass total_steps (the run resolves num_epochs to steps) or set "
                "num_train_steps."
            )
        return decay_schedule(config.schedule, config.learning_rate, config.warmup_steps, steps)
    raise ValueError(f"schedule={config.schedule!r}; choose one of {SCHEDULES}.")


def make_optimizer(
    config: ml_collections.ConfigDict, model_dim: int, total_steps: int | None = None
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """Optional global-norm clipping (d2l's grad_clipping, θ = 1), then Adam or AdamW.

    `total_steps` is the run's length, which the decaying schedules need (see make_schedule).
    """
    schedule = make_schedule(config, model_dim, total_steps)
    if config.optimizer == "adam":
        opt = optax.adam(schedule, b1=config.adam_b1, b2=config.adam_b2, eps=config.adam_eps)
    elif config.optimizer == "adamw":
        opt = optax.adamw(
            schedule,
            b1=config.adam_b1,
            b2=config.adam_b2,
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
        )
    else:
        raise ValueError(f"optimizer={config.optimizer!r}; choose one of {OPTIMIZERS}.")
    if config.clip_norm > 0:
        opt = optax.chain(optax.clip_by_global_norm(config.clip_norm), opt)
    return opt, schedule
