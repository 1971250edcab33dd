"""transformer_jax: a JAX/Flax functional research framework for Transformer seq2seq models.

Importing it changes nothing outside the package; process tuning (XLA flags, the host
allocator, JAX's CPU lowering of Threefry) is applied explicitly with
`transformer_jax.runtime.configure_process(config)`.
"""

__version__ = "0.1.0"
