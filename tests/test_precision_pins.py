"""The matmul-precision pin of the tests that compare against float64 (`float32_matmuls`,
tests/helpers.py) reaches the model: every matmul of its lowered forward and backward
passes carries the pinned precision, so the pin cannot silently stop working."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import MATMUL_PRECISION, float32_matmuls
from transformer_jax.nn import ModelConfig, Transformer
from transformer_jax.training.losses import weighted_loss_sums

pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

CFG = ModelConfig(
    src_vocab_size=11,
    tgt_vocab_size=13,
    num_encoder_layers=1,
    num_decoder_layers=1,
    model_dim=8,
    num_heads=2,
    ffn_dim=16,
    deterministic=True,
)
SRC, SRC_LEN, TGT = np.ones((2, 5), np.int32), np.array([5, 3], np.int32), np.ones((2, 4), np.int32)
# Jitted at import, before any fixture: the setting is part of the jit cache key, so a call
# under the pin traces it again with the pinned precision.
APPLY = jax.jit(Transformer(CFG).apply)


def _dot_precisions(stablehlo: str) -> list[tuple[str, str]]:
    """The operand precisions `(lhs, rhs)` of every dot_general in a lowered module's text."""
    dots = [line for line in stablehlo.splitlines() if "stablehlo.dot_general" in line]
    found = [re.search(r"precision = \[(\w+), (\w+)\]", line) for line in dots]
    assert all(found), [line for line, m in zip(dots, found, strict=True) if not m][:3]
    return [m.groups() for m in found]


def test_the_pin_reaches_every_matmul_of_the_model():
    pinned = (jax.lax.Precision(MATMUL_PRECISION).name,) * 2  # ("HIGHEST", "HIGHEST")
    params = jax.eval_shape(Transformer(CFG).init, jax.random.key(0), SRC, SRC_LEN, TGT)
    forward = _dot_precisions(APPLY.lower(params, SRC, SRC_LEN, TGT).as_text())
    # 23 matmuls in a 1+1-layer model: 4 projections and 2 attention products per attention
    # sublayer, 2 per FFN, the output projection.
    assert len(forward) >= 20 and set(forward) == {pinned}, sorted(set(forward))

    # The train step's objective under both derivative rules: JAX's transposes and the
    # custom VJPs' own backward matmuls.
    for gradients in ("autodiff", "custom_vjp"):
        model = Transformer(CFG.replace(gradients=gradients))

        def loss(p, model=model, gradients=gradients):
            logits = model.apply(p, SRC, SRC_LEN, TGT)
            sums = weighted_loss_sums(logits, TGT, jnp.ones(TGT.shape), 0.1, gradients=gradients)
            return sums["loss"] / sums["weight"]

        backward = _dot_precisions(jax.jit(jax.grad(loss)).lower(params).as_text())
        assert len(backward) > len(forward) and set(backward) == {pinned}, (
            gradients,
            sorted(set(backward)),
        )

    # Not vacuous: unpinned, the same function lowers at the backend's default.
    with jax.default_matmul_precision(None):
        default = _dot_precisions(APPLY.lower(params, SRC, SRC_LEN, TGT).as_text())
    assert set(default) == {("DEFAULT", "DEFAULT")} and len(default) == len(forward)
