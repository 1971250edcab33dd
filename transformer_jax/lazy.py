"""A subpackage's public names, each imported when first read (PEP 562).

    # transformer_jax/data/__init__.py
    __getattr__, __dir__, __all__ = lazy.exports(__name__, {
        "transformer_jax.data.vocab": ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID"],
        ...
    })

Each subpackage re-exports its modules' public names. Imported eagerly, they made any import
of one module pull in its whole package and what that imports: `transformer_jax.launch` needs
three small modules of `data` and `evaluation`, and got TFDS, matplotlib (evaluation's plots)
and the input pipeline, 2 s before a launcher could print its --help. Here a name's module is
imported when the name is first read (`from transformer_jax.data import load_split_pairs`,
`data.load_split_pairs`, `from transformer_jax.data import *`), then kept as a plain
attribute of the package. A module of the package is an attribute once imported, as before
(`transformer_jax.data.batching` after `import transformer_jax.data`): read, it is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable


def exports(
    package: str, names_by_module: dict[str, list[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """(`__getattr__`, `__dir__`, `__all__`) of `package`, re-exporting each module's names."""
    where = {name: module for module, names in names_by_module.items() for name in names}
    # A name that is also a module of the package (`ops.softmax`, the function of
    # `ops/softmax.py`) is bound now: importing that module later would bind the module.
    modules = {m.name for m in pkgutil.iter_modules(sys.modules[package].__path__)}
    for name in sorted(modules & set(where)):
        if where[name] != package:
            importlib.import_module(f"{package}.{name}")
            setattr(sys.modules[package], name, getattr(importlib.import_module(where[name]), name))

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module == package:  # a module of the package, re-exported as itself
            value = importlib.import_module(f"{package}.{name}")
        elif module is not None:
            value = getattr(importlib.import_module(module), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}"):
            value = importlib.import_module(f"{package}.{name}")  # a module of the package
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)  # read again: a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__, list(where)
