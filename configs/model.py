"""Named model variants as ml_collections configs (the `model` section of a run config).

    from configs import model
    cfg = model.get_config("base")   # the paper's Transformer-base

Vocabulary sizes are not part of the variant: they come from the tokenizers at run time.
"""

from __future__ import annotations

import ml_collections

from transformer_jax.nn.config import ModelConfig

# Shared defaults of every variant; each variant overrides the sizes.
_DEFAULTS = dict(
    activation="relu",
    norm_placement="post",
    norm_kind="layer",
    norm_eps=1e-5,
    attention_kind="dot",
    additive_dim=0,
    positional="sinusoidal",
    max_len=1024,
    share_embeddings=False,
    tie_output=False,
    use_bias=True,
    dtype="float32",
    remat=False,
    pad_id=0,
)

VARIANTS: dict[str, dict] = {
    # d2l §11.7.5: 2+2 layers, D 32, H 4, F 64, dropout 0.1.
    "d2l": dict(
        num_encoder_layers=2, num_decoder_layers=2, model_dim=32, num_heads=4, ffn_dim=64,
        dropout_rate=0.1, attention_dropout_rate=0.1,
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


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The model section for variant `arg` (default "d2l")."""
    name = arg or "d2l"
    if name not in VARIANTS:
        raise ValueError(f"Unknown model variant {name!r}; choose one of {sorted(VARIANTS)}.")
    section = ml_collections.ConfigDict({**_DEFAULTS, **VARIANTS[name]})
    # Fail here, not at compile time, if a variant ever drifts from ModelConfig.
    ModelConfig.from_dict(section.to_dict(), src_vocab_size=1, tgt_vocab_size=1)
    return section
