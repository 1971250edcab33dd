"""How to decode: search or sampling, how many hypotheses, a forced target prefix.

    options = DecodeOptions(beam_size=4, nbest=2)                  # 2-best of a beam of 4
    options = DecodeOptions(temperature=0.8, top_p=0.9, seed=3)    # nucleus sampling, seeded
    options = DecodeOptions.from_mapping({"nbest": 3, "temperature": 1.0})   # 3 samples
    results = translator.translate_options(["go ."], options)     # -> [Hypotheses(...)]

`inference.Translator.translate_options(lines, options) -> list[Hypotheses]` is the call that
returns the n-best with their scores (a server's, `translate --nbest`); `Translator.translate`
takes the same names as keywords and returns the best text only. Defaults: the table in
`decoding/defaults.py`.

Fields:
  beam_size: 1 = greedy search; W > 1 = beam search (ranked by log P / ((5 + len) / 6)^alpha).
  alpha: the beam length penalty exponent (>= 0).
  nbest: hypotheses returned per sentence, best first: at most beam_size when searching;
    when sampling, nbest independent samples, ranked by their score.
  temperature: 0 = search; > 0 = draw each token from softmax(logits / temperature), after
    the top_k and top_p filters (`decoding.sampling`). Sampling ignores beam_size.
  top_k: sample among the k most probable tokens (0 = all).
  top_p: sample among the smallest set of most probable tokens whose probability reaches
    top_p (nucleus sampling, Holtzman et al. 2020); 1.0 = all.
  seed: the random seed of sampling, 0 <= seed < 2**32: the same seed, inputs and settings
    give the same output.
  prefix: the forced start of every translation (text, encoded by the target tokenizer), or a
    sequence of one per sentence (None or "" = none); the search continues after it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from typing import Any

from transformer_jax.decoding.defaults import DEFAULTS, OPTION_DEFAULTS

Prefix = str | tuple[str | None, ...] | None


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    """The decoding choices of one call (module docstring); `validate()` checks them."""

    beam_size: int = DEFAULTS["beam_size"]
    alpha: float = DEFAULTS["alpha"]
    nbest: int = OPTION_DEFAULTS["nbest"]
    temperature: float = OPTION_DEFAULTS["temperature"]
    top_k: int = OPTION_DEFAULTS["top_k"]
    top_p: float = OPTION_DEFAULTS["top_p"]
    seed: int = OPTION_DEFAULTS["seed"]
    prefix: Prefix = OPTION_DEFAULTS["prefix"]

    def __post_init__(self) -> None:
        if isinstance(self.prefix, list):  # a list is not hashable: keep a tuple
            object.__setattr__(self, "prefix", tuple(self.prefix))

    @property
    def sampling(self) -> bool:
        """Whether tokens are drawn (temperature > 0) rather than searched."""
        return self.temperature > 0

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> DecodeOptions:
        """Options from a mapping of field names (None = the default), validated.

        An unknown key is a ValueError naming it, the closest field and every field.
        """
        names = cls.field_names()
        for key in values:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(
                    f"unknown decoding option {key!r}{hint}; valid ones are {', '.join(names)}."
                )
        options = cls(**{k: v for k, v in values.items() if v is not None})
        options.validate()
        return options

    def replace(self, **changes: Any) -> DecodeOptions:
        return dataclasses.replace(self, **changes)

    def validate(self) -> DecodeOptions:
        """Returns self, or raises a one-line ValueError naming the field and its range."""
        _check_int("beam_size", self.beam_size, "an integer >= 1 (1 = greedy search)", low=1)
        _check_real("alpha", self.alpha, "a number >= 0 (0 = rank by log P)", lambda x: x >= 0)
        _check_int("nbest", self.nbest, "an integer >= 1", low=1)
        _check_real(
            "temperature",
            self.temperature,
            "a number >= 0 (0 = search, > 0 = sampling)",
            lambda x: x >= 0,
        )
        _check_int("top_k", self.top_k, "an integer >= 0 (0 = every token)", low=0)
        _check_real("top_p", self.top_p, "a number in (0, 1] (1 = every token)", _unit)
        # Sampling keys are made from a uint32 (`sampling.row_keys`), as are CTranslate2's.
        _check_int("seed", self.seed, "an integer in [0, 2**32)", low=0, high=2**32)
        if not self.sampling and self.nbest > self.beam_size:
            raise ValueError(
                f"nbest={self.nbest} is more than beam_size={self.beam_size}: beam search "
                f"keeps beam_size hypotheses; set beam_size >= {self.nbest} (or sample with "
                "temperature > 0)."
            )
        prefixes = self.prefix if isinstance(self.prefix, tuple) else (self.prefix,)
        if not all(p is None or isinstance(p, str) for p in prefixes):
            raise ValueError(
                f"prefix must be None, a string or a list of strings (one per sentence), got "
                f"{self.prefix!r}."
            )
        return self

    def prefixes(self, count: int) -> list[str]:
        """One prefix per sentence of `count` ("" = none); a ValueError if a list of
        per-sentence prefixes has another length."""
        if isinstance(self.prefix, tuple):
            if len(self.prefix) != count:
                raise ValueError(
                    f"prefix has {len(self.prefix)} entries for {count} sentences: give one "
                    "per sentence, or one string for all."
                )
            return [p or "" for p in self.prefix]
        return [self.prefix or ""] * count


@dataclasses.dataclass(frozen=True)
class Hypotheses:
    """The n-best of one sentence, best first (what `Translator.translate_options` returns).

    texts: the translations (as the data stores text; `Translator.natural` makes them
      readable). log_probs: each one's log P under the model(s), `<eos>` included (a forced
      prefix's tokens included; for samples, the model's probability, not the tempered one).
    scores: log P / ((5 + len) / 6)^alpha, len counting `<eos>`: what beam search ranks by
      (and samples are sorted by). An empty input: one hypothesis "" with scores 0.
    """

    texts: tuple[str, ...]
    log_probs: tuple[float, ...]
    scores: tuple[float, ...]

    @property
    def best(self) -> str:
        return self.texts[0]


def _check_int(name: str, value: Any, allowed: str, *, low: int, high: int | None = None) -> None:
    """A ValueError unless value is an int (not a bool) with low <= value < high."""
    bad = isinstance(value, bool) or not isinstance(value, int) or value < low
    if bad or (high is not None and value >= high):
        raise ValueError(f"{name} must be {allowed}, got {value!r}.")


def _check_real(name: str, value: Any, allowed: str, ok) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{name} must be {allowed}, got {value!r}.")


def _unit(x: float) -> bool:
    return 0 < x <= 1


def options_of(settings: Mapping[str, Any]) -> DecodeOptions:
    """The `DecodeOptions` fields held by a settings dict (e.g. `decode_settings`'), validated."""
    return DecodeOptions.from_mapping(
        {k: settings[k] for k in DecodeOptions.field_names() if k in settings}
    )
