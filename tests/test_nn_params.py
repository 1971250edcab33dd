"""nn/params.param: the same values as flax's `Module.param` at init, and on apply the same
refusal of a stored parameter of another shape, without tracing the initializer."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import errors

from transformer_jax.nn.params import param


class _Flax(nn.Module):
    @nn.compact
    def __call__(self, x):
        w = self.param("w", nn.initializers.xavier_uniform(), (3, 4), jnp.float32)
        b = self.param("b", nn.initializers.normal(0.5), (4,), jnp.float32)
        return x @ w + b


class _Ours(nn.Module):
    @nn.compact
    def __call__(self, x):
        w = param(self, "w", nn.initializers.xavier_uniform(), (3, 4))
        b = param(self, "b", nn.initializers.normal(0.5), [4])  # any sequence of ints
        return x @ w + b


def test_init_draws_the_values_flax_param_draws():
    x = jnp.ones((2, 3))
    ours = _Ours().init(jax.random.key(7), x)["params"]
    theirs = _Flax().init(jax.random.key(7), x)["params"]
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert a.dtype == b.dtype == jnp.float32
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        _Ours().apply({"params": ours}, x), _Flax().apply({"params": theirs}, x)
    )


def test_a_stored_parameter_of_another_shape_is_refused_on_apply():
    x = jnp.ones((2, 3))
    params = _Ours().init(jax.random.key(0), x)["params"]
    params = {**params, "w": jnp.zeros((3, 5))}
    with pytest.raises(errors.ScopeParamShapeError, match=r"shape \(3, 4\), but .* shape \(3, 5\)"):
        _Ours().apply({"params": params}, x)
    with pytest.raises(errors.ScopeParamShapeError):  # traced too (under jit)
        jax.jit(lambda p: _Ours().apply({"params": p}, x))(params)


def test_apply_does_not_trace_the_initializer():
    calls = []

    def counted(key, shape, dtype):
        calls.append(shape)
        return jnp.zeros(shape, dtype)

    class _Counted(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x * param(self, "s", counted, (3,))

    params = _Counted().init(jax.random.key(0), jnp.ones(3))["params"]
    assert calls == [(3,)]
    _Counted().apply({"params": params}, jnp.ones(3))
    assert calls == [(3,)]  # flax's Module.param traces it again here, on every apply
    with pytest.raises(errors.ScopeCollectionNotFound):  # as flax's param says
        _Counted().apply({"params": {}}, jnp.ones(3))
