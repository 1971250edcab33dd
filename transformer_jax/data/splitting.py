"""Deterministic train / validation / test assignment by the English source sentence.

Tatoeba has many alternative translations of one English sentence ("I'm fine." appears with
several French renderings). A random split by *line* would put the same source in train and
test and overstate BLEU. Hashing the preprocessed source instead sends every translation of a
sentence to the same split: no source sentence of validation/test is ever seen in training.
"""

from __future__ import annotations

import hashlib

SPLIT_NAMES = ("train", "validation", "test")


def split_of(source: str, *, validation_fraction: float, test_fraction: float, seed: int) -> str:
    """Split name for a (preprocessed) source sentence; stable across runs, machines, Pythons.

    Uses sha256 rather than `hash()`, which is salted per process.
    """
    digest = hashlib.sha256(f"{seed}\x00{source}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0**64  # uniform in [0, 1)
    if u < test_fraction:
        return "test"
    if u < test_fraction + validation_fraction:
        return "validation"
    return "train"


def check_fractions(validation_fraction: float, test_fraction: float) -> None:
    """Raises ValueError unless both fractions are in [0, 1) and leave some training data."""
    for name, value in (
        ("validation_fraction", validation_fraction),
        ("test_fraction", test_fraction),
    ):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"data.{name}={value} must be in [0, 1), e.g. 0.05.")
    if validation_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"data.validation_fraction + data.test_fraction = "
            f"{validation_fraction + test_fraction} leaves no training data; keep the sum < 1."
        )
