"""transformer_jax: a JAX/Flax functional research framework for Transformer seq2seq models."""

__version__ = "0.1.0"
