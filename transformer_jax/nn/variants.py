"""Named model sizes (the `model` section of a run config), as ml_collections configs.

    from transformer_jax.nn import variants
    section = variants.model_section("base")   # the paper's Transformer-base

A variant lists only its sizes (and, for `readme`, the choices that make the README model);
every other key keeps `ModelConfig`'s own default. The sizes live beside the model (as
big_vision keeps "B/16" beside its ViT), so a config file imports them from the library and
loads the same from a checkout or an installed package; `configs/model.py` exposes them as a
config file.
Vocabulary sizes are not part of a variant: they come from the tokenizers at run time.
"""

from __future__ import annotations

import ml_collections

from transformer_jax.nn.config import ModelConfig

# Each variant lists the keys it sets; every other key keeps ModelConfig's own default
# (`ModelConfig.defaults_dict()`, the one place the model's defaults live).
VARIANTS: dict[str, dict] = {
    # d2l §11.7.5: 2+2 layers, D 32, H 4, F 64, dropout 0.1.
    "d2l": dict(
        num_encoder_layers=2, num_decoder_layers=2, model_dim=32, num_heads=4, ffn_dim=64,
        dropout_rate=0.1, attention_dropout_rate=0.1,
    ),
    # The README run's model (configs/fra_eng.py): D 128, 2+2, F 512, no dropout (a run of
    # minutes is far from overfitting 150k pairs); one table for both embeddings and the output
    # (benchmarks/LOG.md, "a joint 4,000-piece vocabulary ... (kept)"); norm first, which trains
    # at the README's peak of 8e-3 (LOG.md, "Norm first at a peak of 8e-3 for the README run");
    # the machine's fast compute dtype: bfloat16 on TPU/GPU/AMX CPUs, float32 elsewhere.
    "readme": dict(
        num_encoder_layers=2, num_decoder_layers=2, model_dim=128, num_heads=4, ffn_dim=512,
        dropout_rate=0.0, attention_dropout_rate=0.0, dtype="auto", share_embeddings=True,
        tie_output=True, norm_placement="pre",
    ),
    # A width that trains well on 2 CPU cores in minutes.
    "small": dict(
        num_encoder_layers=3, num_decoder_layers=3, model_dim=256, num_heads=4, ffn_dim=1024,
        dropout_rate=0.1, attention_dropout_rate=0.1,
    ),
    # Vaswani et al. 2017, Table 3, "base".
    "base": dict(
        num_encoder_layers=6, num_decoder_layers=6, model_dim=512, num_heads=8, ffn_dim=2048,
        dropout_rate=0.1, attention_dropout_rate=0.1,
    ),
    # Vaswani et al. 2017, Table 3, "big".
    "big": dict(
        num_encoder_layers=6, num_decoder_layers=6, model_dim=1024, num_heads=16,
        ffn_dim=4096, dropout_rate=0.3, attention_dropout_rate=0.3,
    ),
    # For tests and `runlocal`: compiles in seconds.
    "tiny": dict(
        num_encoder_layers=1, num_decoder_layers=1, model_dim=16, num_heads=2, ffn_dim=32,
        dropout_rate=0.1, attention_dropout_rate=0.1, max_len=128,
    ),
}  # fmt: skip


def model_section(name: str = "d2l") -> ml_collections.ConfigDict:
    """The model section of variant `name`: ModelConfig's defaults plus the variant's sizes."""
    if name not in VARIANTS:
        raise ValueError(f"Unknown model variant {name!r}; choose one of {sorted(VARIANTS)}.")
    # Validated with the whole run config (`training.validate_config`), before anything is built.
    return ml_collections.ConfigDict({**ModelConfig.defaults_dict(), **VARIANTS[name]})
