"""Named model variants as a config file (the `model` section of a run config).

    from configs import model
    cfg = model.get_config("base")   # the paper's Transformer-base

The sizes live in `transformer_jax.nn.variants` (run configs import them from there, so they
load the same from a checkout or an installed package). Every key a variant does not list
keeps its default from `transformer_jax.nn.ModelConfig`.
"""

from __future__ import annotations

import ml_collections

from transformer_jax.nn.variants import VARIANTS, model_section


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The model section for variant `arg` (default "d2l")."""
    return model_section(arg or "d2l")


__all__ = ["VARIANTS", "get_config"]
