"""Export a trained model for serving: CTranslate2 model directories and StableHLO programs.

`ctranslate2` and `jax.export` are imported when an exporter runs, not on import.
"""

from transformer_jax.export.ctranslate2 import (
    UnsupportedModelError,
    check_supported,
    convert,
    export_ctranslate2,
)
from transformer_jax.export.stablehlo import export_stablehlo
from transformer_jax.export.trained_model import load_trained

__all__ = [
    "UnsupportedModelError",
    "check_supported",
    "convert",
    "export_ctranslate2",
    "export_stablehlo",
    "load_trained",
]
