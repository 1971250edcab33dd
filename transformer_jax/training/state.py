"""The train state: everything the step updates, and everything a checkpoint restores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer_jax.nn import ModelConfig, Transformer
from transformer_jax.training.optimizer import make_optimizer
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir.checkpoints import model_config_from
from transformer_jax.workdir.params import abstract_params

__all__ = [
    "TrainState",
    "abstract_run_state",
    "abstract_train_state",
    "create_train_state",
    "init_params",
    "model_config_from",  # defined beside the checkpoints that record its vocabulary sizes
]


@flax.struct.dataclass
class TrainState:
    """step () int32; params and opt_state pytrees; rng (2,) uint32, the run's base key.

    The dropout key of step n is derived as fold_in(rng, n) (then per device and micro-batch),
    so `rng` never changes and a resumed run draws exactly the masks an uninterrupted one would.
    """

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array


# XLA options for programs that run once (initialisation).
_ONE_SHOT = {"xla_backend_optimization_level": 0}


def init_params(model_config: ModelConfig, rng: jax.Array) -> Any:
    """Parameters of `Transformer(model_config)` from a (2,) key, on the host (numpy).

    Computed on the host's CPU device where JAX has one (the parameters are wanted on the
    host anyway): on an H200 the README model's init program took 12 s to compile for the
    GPU, where XLA:CPU compiles it in ~2 s. Without a CPU backend (JAX_PLATFORMS=cuda), on
    this process's first device.
    """
    model = Transformer(model_config.replace(deterministic=True))
    host = _host_device()
    with jax.default_device(host):
        src = jnp.ones((1, 2), jnp.int32)  # (B, S): shapes do not matter for the parameters
        tgt = jnp.ones((1, 2), jnp.int32)  # (B, T)
        rng = jax.device_put(rng, host)
        args = ({"params": rng}, src, jnp.array([2], jnp.int32), tgt)
        # Runs once: compiled without XLA's backend optimisation, which costs more time than
        # it could save here (d2l: compile 2.3 -> 1.5 s; values within 3e-8 of the optimised).
        init = jax.jit(model.init).lower(*args).compile(compiler_options=_ONE_SHOT)
        return jax.device_get(nn.unbox(init(*args)["params"]))


def _host_device() -> jax.Device:
    """This process's first CPU device, or its first device where JAX runs without a CPU
    backend. Local: in a multi-process run `jax.devices()` also lists the other processes'
    devices, which this process cannot compute on."""
    try:
        return jax.local_devices(backend="cpu")[0]
    except (RuntimeError, ValueError):  # "Unknown backend cpu"
        return jax.local_devices()[0]


def create_train_state(
    model_config: ModelConfig, tx: optax.GradientTransformation, seed: int
) -> TrainState:
    """A fresh host-side (numpy) state: step 0, initial params and optimizer state."""
    init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(seed))
    params = init_params(model_config, init_rng)
    opt_state = jax.device_get(jax.jit(tx.init)(params))  # one compile, not one per leaf
    return TrainState(
        step=np.asarray(0, np.int32),
        params=params,
        opt_state=opt_state,
        rng=np.asarray(jax.device_get(dropout_rng)),
    )


def abstract_train_state(model_config: ModelConfig, tx: optax.GradientTransformation) -> TrainState:
    """Shapes and dtypes of `create_train_state` without computing anything (for restores)."""
    params = abstract_params(model_config)
    return TrainState(
        step=jax.ShapeDtypeStruct((), jnp.int32),
        params=params,
        opt_state=jax.eval_shape(tx.init, params),
        rng=jax.eval_shape(jax.random.PRNGKey, 0),
    )


def abstract_run_state(workdir: str | Path) -> TrainState:
    """The shapes of the TrainState in a run's checkpoints: its model and its optimizer."""
    config, _, _, model_config = ckpt.load_run(workdir)
    # Shapes only: any run length will do for a decaying schedule.
    tx, _ = make_optimizer(config, model_config.model_dim, total_steps=1)
    return abstract_train_state(model_config, tx)
