"""Export a trained model for serving: CTranslate2 model directories and StableHLO programs.

`ctranslate2` and `jax.export` are imported when an exporter runs, not on import.
"""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.export.ctranslate2": [
            "UnsupportedModelError",
            "check_supported",
            "convert",
            "export_ctranslate2",
        ],
        "transformer_jax.export.stablehlo": ["export_stablehlo"],
        "transformer_jax.export.trained_model": ["load_trained"],
    },
)
