"""Temporary: the three names `training/train.py` still imports from `decoding`.

They forward to `transformer_jax.inference`, the one inference path. Delete this module (and
its lines in `decoding/__init__.py`) once the train loop's `_bleu` builds a
`Translator.from_params` (issue 16 item 5; that file is edited separately).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformer_jax.inference.settings import decode_settings
from transformer_jax.inference.sources import DecodingWarning
from transformer_jax.nn import ModelConfig


def translate(
    model_config: ModelConfig,
    params: Any,
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    sentences: Sequence[str],
    **settings: Any,
) -> list[str]:
    """`Translator.from_params(...).translate(sentences, **settings)`."""
    from transformer_jax.inference import Translator

    translator = Translator.from_params(model_config, params, src_tokenizer, tgt_tokenizer)
    return translator.translate(sentences, **settings)


__all__ = ["DecodingWarning", "decode_settings", "translate"]
