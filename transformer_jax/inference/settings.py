"""Decoding settings: a run config's `eval` and `data` keys -> `Translator.translate` keywords."""

from __future__ import annotations

from typing import Any

# Every keyword `Translator.translate` takes, with its default: the one table.
from transformer_jax.decoding.defaults import DEFAULTS, EVAL_KEYS, OPTION_DEFAULTS


def decode_settings(config: Any = None, **overrides: Any) -> dict[str, Any]:
    """`Translator.translate` keywords from a run config's `eval` and `data` sections.

    Without a config, `DEFAULTS`. `overrides` with a value other than None win (e.g. a
    command-line `--beam_size`); an unknown keyword is a TypeError naming the valid ones.
    Configs saved before a key existed get its default. The `DecodeOptions` keys of
    `OPTION_DEFAULTS` (nbest, temperature, top_k, top_p, seed, prefix) are accepted too and
    appear only when given.
    """
    valid = {*DEFAULTS, *OPTION_DEFAULTS}  # OPTION_DEFAULTS' keys are kept only when given
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise TypeError(f"unknown decoding setting(s) {unknown}; valid ones are {sorted(valid)}.")
    settings = dict(DEFAULTS)
    if config is not None:
        settings.update(
            {name: config.eval.get(key, DEFAULTS[name]) for name, key in EVAL_KEYS.items()}
        )
        settings["max_decode_len"] = settings["max_decode_len"] or None  # a config's 0 = none
        settings["trained_len"] = config.data.get("max_src_len")
    settings.update({k: v for k, v in overrides.items() if v is not None})
    check_segment_len(settings["segment_len"])
    return settings


def check_segment_len(segment_len: Any) -> None:
    """A ValueError naming `segment_len` and its meaning unless it is an integer >= 0."""
    if isinstance(segment_len, bool) or not isinstance(segment_len, int) or segment_len < 0:
        raise ValueError(
            f"segment_len must be an integer >= 0 (1 = sentence by sentence, N = whole sentences "
            f"in parts of up to N tokens, 0 = every input whole), got {segment_len!r}."
        )
