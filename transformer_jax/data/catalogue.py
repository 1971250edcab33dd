"""Dataset names and split strings, checked before anything is built.

A wrong `data.name` or a split typo would otherwise surface as a TFDS traceback after the
workdir was made (a split typo only once the whole dataset was built). Both are checked here
from what is known without preparing anything: TFDS's registry of builders (and their config
names), the fra_eng builder's split names, and TFDS's own parser of split strings
(`tfds.core.ReadInstruction.from_spec`, https://www.tensorflow.org/datasets/splits).
A catalogue dataset's split names are only known once it is prepared, so for those only the
syntax is checked up front.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Sequence
from pathlib import Path

# `train+validation[:10%]`: TFDS joins splits with "+" (its `_ADDITION_SEP_RE`).
_ADDITION = re.compile(r"\s*\+\s*")
SPLIT_SYNTAX = "name or name[from:to] (counts or percentages), joined with '+'"


def check_split(key: str, spec: object, names: Sequence[str] | None) -> None:
    """Raises ValueError unless `spec` parses as TFDS split string over `names` (None = any).

    `key` is the config key for the message, e.g. "data.train_split".
    """
    import tensorflow_datasets as tfds

    examples = "e.g. 'train', 'train[:1000]', 'train[10%:]' or 'train+validation'"
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{key}={spec!r} is not a split: write {SPLIT_SYNTAX}, {examples}.")
    for part in _ADDITION.split(spec.strip()):
        try:
            instruction = tfds.core.ReadInstruction.from_spec(part)
        except (ValueError, NotImplementedError) as error:
            reason = _reason(str(error))
            raise ValueError(
                f"{key}={spec!r}: {part!r} is not a TFDS split ({reason}); write "
                f"{SPLIT_SYNTAX}, {examples}."
            ) from None
        name = getattr(instruction, "split_name", "all")  # "all" parses to TFDS's _SplitAll
        if names is not None and name != "all" and name not in names:
            raise ValueError(
                f"{key}={spec!r} names the split {name!r}, which the dataset does not have; "
                f"choose one of {list(names)}{_did_you_mean(name, names)}."
            )


def check_dataset_name(name: object) -> None:
    """Raises ValueError unless `name` ("dataset" or "dataset/config") is a TFDS builder."""
    import tensorflow_datasets as tfds

    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"data.name={name!r} is not a dataset name; {_name_choices()}.")
    dataset, _, rest = name.partition("/")
    config = rest.partition(":")[0]  # "name/config:1.0.0" pins a version
    try:
        builder = tfds.builder_cls(dataset)
    except tfds.core.registered.DatasetNotFoundError:
        _import_translate_catalogue()
        try:
            builder = tfds.builder_cls(dataset)
        except tfds.core.registered.DatasetNotFoundError:
            raise ValueError(
                f"data.name={name!r}: TFDS has no dataset {dataset!r}"
                f"{_did_you_mean(dataset, catalogue_names())}; {_name_choices()}."
            ) from None
    configs = sorted(getattr(builder, "builder_configs", None) or {})
    if config and configs and config not in configs:
        raise ValueError(
            f"data.name={name!r}: {dataset} has no config {config!r}; choose one of "
            f"{[f'{dataset}/{c}' for c in configs]}."
        )


@functools.cache
def catalogue_names() -> tuple[str, ...]:
    """Dataset names TFDS knows without the network: imported builders and its datasets/."""
    import tensorflow_datasets as tfds
    import tensorflow_datasets.datasets as packaged

    _import_translate_catalogue()
    names = set(tfds.core.registered.list_imported_builders())
    for path in packaged.__path__:
        names.update(
            entry.name
            for entry in Path(path).iterdir()
            if entry.is_dir() and not entry.name.startswith("_")
        )
    return tuple(sorted(names))


def _reason(message: str) -> str:
    # TFDS prefixes "Error parsing split ... See format at: <url>" on a line of its own and
    # ends its own reason with the URL or the parsed instruction: keep the reason.
    reason = message.splitlines()[-1] if "\n" in message else message
    for tail in (". See format", ". Got:"):
        reason = reason.split(tail)[0]
    return reason.strip()


def _name_choices() -> str:
    translation = [n for n in catalogue_names() if "translat" in n]
    return (
        "use 'fra_eng' (the d2l corpus, built here) or a TFDS translation dataset with its "
        f"config, e.g. 'wmt14_translate/de-en' (translation datasets: {translation})"
    )


def _did_you_mean(value: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


@functools.cache
def _import_translate_catalogue() -> None:
    # The WMT family is not registered by `import tensorflow_datasets` alone, nor our fra_eng
    # builder until its module is imported (here, not at the top: it imports TFDS).
    import tensorflow_datasets.translate  # noqa: F401

    import transformer_jax.data.fra_eng  # noqa: F401
