"""Initial parameters are computed on the host's CPU device (state.init_params)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.nn import ModelConfig, Transformer
from transformer_jax.training import state

CONFIG = ModelConfig(src_vocab_size=40, tgt_vocab_size=30, model_dim=16, ffn_dim=24, num_heads=2)


def _by_hand(key):
    model = Transformer(CONFIG.replace(deterministic=True))
    ones = jnp.ones((1, 2), jnp.int32)
    return nn.unbox(jax.jit(model.init)({"params": key}, ones, jnp.array([2]), ones)["params"])


def test_init_params_are_the_models_init_computed_on_the_host_cpu():
    assert state._host_device().platform == "cpu"
    key = jax.random.PRNGKey(3)
    params = state.init_params(CONFIG, key)
    assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(params))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), params, _by_hand(key))


def test_without_a_cpu_backend_init_runs_on_the_default_device(monkeypatch):
    local_devices = jax.local_devices

    def no_cpu(process_index=None, backend=None):
        if backend == "cpu":
            raise RuntimeError("Unknown backend cpu")  # JAX_PLATFORMS=cuda
        return local_devices(process_index, backend)

    monkeypatch.setattr(jax, "local_devices", no_cpu)
    assert state._host_device() == local_devices()[0]
    key = jax.random.PRNGKey(3)
    jax.tree.map(
        np.testing.assert_array_equal,
        state.init_params(CONFIG, key),
        state.init_params(CONFIG, key),
    )
