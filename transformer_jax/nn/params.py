"""`param`: a module's parameter of a given shape, checked without tracing its initializer.

flax's `Module.param` checks on every apply that a stored parameter has the shape its
initializer makes, by tracing the initializer under `jax.eval_shape`: about a millisecond
a parameter each time a model is traced, which is every compile of a train step, an
evaluation or a decoding program (measured: 0.43 s of the 1.45 s spent tracing when the
translate command decodes one line with the README model). Every parameter here is made
with an explicit shape, so the same check is a comparison of two tuples.

The parameter is created by the same call on the same "params" stream as `Module.param`
(`init(make_rng("params"), shape, dtype)`), so `init` gives the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from flax import errors


def param(
    module: nn.Module,
    name: str,
    init: Callable[..., Any],
    shape: Sequence[int],
    dtype: Any = jnp.float32,
) -> Any:
    """`module.param(name, init, shape, dtype)`: created by `init` at init time; on apply the
    stored value, whose shape must be `shape` (flax's `ScopeParamShapeError` otherwise)."""
    shape = tuple(shape)
    variable = module.variable(
        "params", name, lambda: init(module.make_rng("params"), shape, dtype)
    )
    value = variable.value
    if np.shape(value) != shape:
        raise errors.ScopeParamShapeError(name, module.scope.path_text, np.shape(value), shape)
    return value
