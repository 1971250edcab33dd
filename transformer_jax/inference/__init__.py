"""Inference: one `Translator` built from a workdir (parameters only) or from parameters in
memory; text in, text out. Used by translate, evaluate, the train loop's BLEU, the notebook.

    from transformer_jax.inference import Translator
    Translator.from_workdir("runs/fra_eng").translate(["go ."])
"""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.decoding.shapes": ["SourceTooLongError"],
        "transformer_jax.inference.run_specs": ["split_checkpoint"],
        "transformer_jax.inference.settings": ["DEFAULTS", "decode_settings"],
        "transformer_jax.inference.source_ids": [
            "DecodingWarning",
            "EncodedSources",
            "encode_sources",
        ],
        "transformer_jax.inference.translator": ["Translations", "Translator", "load_translator"],
    },
)
