"""Tiny models for tests and benchmarks: a small `ModelConfig` and random parameters.

    cfg = tiny_config(src_vocab_size=23, tgt_vocab_size=13, max_len=32)
    params = random_params(cfg, seed=1)  # no random ops to compile
    Translator.from_params(cfg, params, src_tokenizer, tgt_tokenizer)

`tiny_config` is the model every test builds unless it checks a size: 2+2 layers, D 32,
H 4 (K 8), F 64, no dropout, deterministic; any `ModelConfig` field can be changed by
keyword. `random_params` fills the parameter tree on the host, so a test or a benchmark gets
a non-degenerate model without compiling `Transformer.init`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.nn import ModelConfig, Transformer

# The tiny model: compiles in seconds, still has every part (two layers of each stack, several
# heads). ModelConfig's own sizes, without dropout and in eval mode.
TINY: dict[str, Any] = {
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
    "model_dim": 32,
    "num_heads": 4,
    "ffn_dim": 64,
    "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0,
    "deterministic": True,
}


def tiny_config(src_vocab_size: int, tgt_vocab_size: int, **changes: Any) -> ModelConfig:
    """The tiny `ModelConfig` (`TINY`) for the given vocabularies, with `changes` applied
    (any ModelConfig field, e.g. `norm_placement="pre"`, `deterministic=False`)."""
    return ModelConfig(
        src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **{**TINY, **changes}
    )


def random_params(cfg: ModelConfig, seed: int = 0, *, bias_std: float = 0.1) -> Any:
    """Random parameters filled on the host from the model's parameter shapes.

    Faster than `Transformer.init`, whose threefry random ops take XLA:CPU ~0.3 s each to
    compile (~14 s for a 2+2 model on a 2-core machine). Kernels ~ N(0, 1/fan_in), embeddings
    ~ N(0, 1/D), norm scales 1, biases and other vectors ~ N(0, bias_std²) (0: zeros, drawing
    nothing): a non-degenerate random model. The same `seed` gives the same parameters.
    """
    src = jnp.zeros((1, 2), jnp.int32)
    shapes = jax.eval_shape(
        Transformer(cfg).init, jax.random.key(0), src, jnp.ones((1,), jnp.int32), src
    )["params"]
    rng = np.random.default_rng(seed)

    def fill(path, leaf):
        name = str(path[-1].key)
        if name == "scale":
            return jnp.ones(leaf.shape, leaf.dtype)
        if leaf.ndim == 1 or name == "bias":
            if not bias_std:
                return jnp.zeros(leaf.shape, leaf.dtype)
            return jnp.asarray(bias_std * rng.normal(size=leaf.shape), leaf.dtype)
        fan_in = leaf.shape[-1] if name == "embedding" else leaf.shape[0]
        return jnp.asarray(rng.normal(size=leaf.shape) / np.sqrt(fan_in), leaf.dtype)

    return jax.tree_util.tree_map_with_path(fill, shapes)
