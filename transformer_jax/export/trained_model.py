"""The one place export reads a trained model from a workdir.

Exporters take an `inference.Translator`: its model config, parameters (restored alone,
no optimizer state), tokenizers, decoding settings and the run's preprocessing. A model
in memory is exported with `Translator.from_params(...)`.
"""

from __future__ import annotations

from pathlib import Path

from transformer_jax.inference import Translator


def load_trained(workdir: str | Path, step: int | None = None) -> Translator:
    """The trained model in `workdir` (its newest usable checkpoint, or `step`)."""
    return Translator.from_workdir(workdir, step)
