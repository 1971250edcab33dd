"""Decoding settings: a run config's `eval` and `data` keys -> `Translator.translate` keywords."""

from __future__ import annotations

from typing import Any

from transformer_jax.decoding.batch_decode import DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B

# Every keyword `Translator.translate` takes, with the default used without a run config.
DEFAULTS: dict[str, Any] = {
    "beam_size": 1,  # 1 = greedy search
    "alpha": 0.6,  # beam length penalty exponent, ((5 + len) / 6)^alpha
    "max_decode_len": None,  # None = the budget a·S + b below
    "max_len_a": DEFAULT_MAX_LEN_A,
    "max_len_b": DEFAULT_MAX_LEN_B,
    "batch_size": 64,  # sentences per decoding batch
    "trained_len": None,  # longest training source with <eos>: longer ones get a warning
    # Inputs longer than this (tokens with <eos>) are translated in parts of whole sentences
    # of at most this length (data/segmenting.py): 1 = sentence by sentence, 0 = whole.
    "split_len": 1,
}


def decode_settings(config: Any = None, **overrides: Any) -> dict[str, Any]:
    """`Translator.translate` keywords from a run config's `eval` and `data` sections.

    Without a config, `DEFAULTS`. `overrides` with a value other than None win (e.g. a
    command-line `--beam_size`); an unknown keyword is a TypeError naming the valid ones.
    Configs saved before a key existed get its default.
    """
    unknown = sorted(set(overrides) - set(DEFAULTS))
    if unknown:
        raise TypeError(
            f"unknown decoding setting(s) {unknown}; valid ones are {sorted(DEFAULTS)}."
        )
    settings = dict(DEFAULTS)
    if config is not None:
        ev, data = config.eval, config.data
        settings.update(
            beam_size=ev.get("beam_size", 1),
            alpha=ev.get("alpha", 0.6),
            max_decode_len=ev.get("max_decode_len", 0) or None,
            max_len_a=ev.get("max_len_a", DEFAULT_MAX_LEN_A),
            max_len_b=ev.get("max_len_b", DEFAULT_MAX_LEN_B),
            batch_size=ev.get("decode_batch_size", 64),
            trained_len=data.get("max_src_len"),
            split_len=ev.get("split_len", 1),
        )
    settings.update({k: v for k, v in overrides.items() if v is not None})
    check_split_len(settings["split_len"])
    return settings


def check_split_len(split_len: Any) -> None:
    """A ValueError naming `split_len` and its meaning unless it is an integer >= 0."""
    if isinstance(split_len, bool) or not isinstance(split_len, int) or split_len < 0:
        raise ValueError(
            f"split_len must be an integer >= 0 (1 = sentence by sentence, N = whole sentences "
            f"in parts of up to N tokens, 0 = every input whole), got {split_len!r}."
        )
