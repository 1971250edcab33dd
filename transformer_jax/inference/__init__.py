"""Inference: one `Translator` built from a workdir (parameters only) or from parameters in
memory; text in, text out. Used by translate, evaluate, the train loop's BLEU, the notebook.

    from transformer_jax.inference import Translator
    Translator.from_workdir("runs/fra_eng").translate(["go ."])
"""

from transformer_jax.decoding.batch_decode import SourceTooLongError
from transformer_jax.inference.run_specs import split_checkpoint
from transformer_jax.inference.settings import DEFAULTS, decode_settings
from transformer_jax.inference.source_ids import DecodingWarning, EncodedSources, encode_sources
from transformer_jax.inference.translator import Translations, Translator, load_translator

__all__ = [
    "DEFAULTS",
    "DecodingWarning",
    "EncodedSources",
    "SourceTooLongError",
    "Translations",
    "Translator",
    "decode_settings",
    "encode_sources",
    "load_translator",
    "split_checkpoint",
]
