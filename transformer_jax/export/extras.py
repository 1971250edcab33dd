"""The `[export]` extra: the optional libraries an exporter or the CTranslate2 engine needs.

    ctranslate2 = import_extra("ctranslate2", "--format=ctranslate2")

`pip install transformer_jax` leaves them out (CTranslate2 is a large binary wheel that
training never uses); `pip install 'transformer_jax[export]'` (pyproject.toml, pinned as in
requirements.txt) adds them. A missing one is a `MissingExtraError` naming that command,
which the launchers print as one FATAL line.
"""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL = "pip install 'transformer_jax[export]'"


class MissingExtraError(ImportError):
    """A library of the `[export]` extra is not installed."""


def import_extra(module: str, needed_by: str) -> ModuleType:
    """`module` imported, or a `MissingExtraError` saying what needs it and how to install it.

    needed_by: what the user asked for ("--format=stablehlo", "--engine=ctranslate2").
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError(
            f"{needed_by} needs {module}, which is not installed: {INSTALL} "
            f"(or pip install -r requirements.txt)."
        ) from error
