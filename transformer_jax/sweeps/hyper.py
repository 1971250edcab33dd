"""Sweep definitions: the `h` handed to a config file's `get_hyper(h, name)` (big_vision style).

A sweep is a list of points; a point is a dict of config overrides keyed by dotted path:

    def get_hyper(h, name):
        if name == "norm_x_attention":
            return h.product([
                h.sweep("model.norm_placement", ["post", "pre"]),
                h.sweep("model.attention_kind", ["dot", "additive"]),
            ])
        raise h.unknown(name, ["norm_x_attention"])
"""

from __future__ import annotations

import builtins
import difflib
import itertools
from collections.abc import Sequence
from typing import Any

Point = dict[str, Any]


def sweep(key: str, values: Sequence[Any]) -> list[Point]:
    """One key over several values: [{key: v} for v in values]."""
    if not values:
        raise ValueError(f"sweep({key!r}, ...) needs at least one value.")
    return [{key: v} for v in values]


def fixed(key: str, value: Any) -> list[Point]:
    """One key at one value (to combine with `product`)."""
    return [{key: value}]


def product(sweeps: Sequence[list[Point]]) -> list[Point]:
    """Every combination of the given sweeps (the first varies slowest)."""
    return [_merge(combo) for combo in itertools.product(*sweeps)]


def zip(sweeps: Sequence[list[Point]]) -> list[Point]:  # noqa: A001 - mirrors big_vision
    """Points taken in lockstep; all sweeps must have the same length."""
    lengths = {len(s) for s in sweeps}
    if len(lengths) > 1:
        raise ValueError(f"zip needs sweeps of equal length, got lengths {sorted(lengths)}.")
    return [_merge(combo) for combo in builtins.zip(*sweeps, strict=True)]


def unknown(name: str, known: Sequence[str]) -> ValueError:
    """The error to raise for a sweep name the config file does not define."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ValueError(f"Unknown sweep {name!r}{hint}; this config defines: {', '.join(known)}.")


def _merge(parts: Sequence[Point]) -> Point:
    merged: Point = {}
    for part in parts:
        clash = set(merged) & set(part)
        if clash:
            raise ValueError(f"A sweep sets {sorted(clash)} twice in one point.")
        merged.update(part)
    return merged
