"""transformer_jax: a JAX/Flax functional research framework for Transformer seq2seq models."""

__version__ = "0.1.0"

from transformer_jax.ops import fast_rng as _fast_rng  # noqa: E402

# Same random bits as JAX's default, without a while loop per draw on CPU (see the module).
_fast_rng.enable_unless_opted_out()
