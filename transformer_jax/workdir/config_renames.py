"""Run-config names that changed: a config written with an old name still works.

A workdir's `config.json` keeps the names of the code that wrote it, and a config file or an
override (`--config.gradients=tuned`) may too. Each renamed name is listed here once:

- `upgrade_saved(values)` maps a saved config (the JSON dict) to today's keys and values when
  it is read (`checkpoints.load_config`, the sweep runner's comparison), so that an old
  workdir still evaluates, translates and resumes. Silent: the run did nothing wrong.
- `upgrade_config(config)` maps an old *value* of a run config to today's, in place, with a
  one-line deprecation note naming the new value (`training.validate_config`). Old values
  are accepted for one release.
"""

from __future__ import annotations

import copy
from typing import Any

import ml_collections
from absl import logging

# Dotted old key -> new key. "split" names dataset splits only; the length above which an
# input is cut at sentence ends is the segment length (data/segmenting.py).
RENAMED_KEYS: dict[str, str] = {"eval.split_len": "eval.segment_len"}
# key -> {old value: new value}. "tuned" said neither what nor for what: the rule is a
# hand-written backward pass (a jax.custom_vjp), measured faster on XLA:CPU.
RENAMED_VALUES: dict[str, dict[str, str]] = {"gradients": {"tuned": "custom_vjp"}}


def upgrade_saved(values: dict[str, Any]) -> dict[str, Any]:
    """A saved config's JSON dict with today's names (a copy; `values` is left as it is)."""
    values = copy.deepcopy(values)
    for old, new in RENAMED_KEYS.items():
        *old_path, old_name = old.split(".")
        *new_path, new_name = new.split(".")
        old_section, new_section = _section(values, old_path), _section(values, new_path)
        if old_section is not None and new_section is not None and old_name in old_section:
            value = old_section.pop(old_name)
            new_section.setdefault(new_name, value)  # a config with both keeps the new one
    for key, renamed in RENAMED_VALUES.items():
        if isinstance(values.get(key), str) and values[key] in renamed:
            values[key] = renamed[values[key]]
    return values


def _section(values: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    """values[path[0]][path[1]]...; None where a section is missing or not a dict."""
    for name in path:
        values = values.get(name)
        if not isinstance(values, dict):
            return None
    return values


def upgrade_config(config: ml_collections.ConfigDict) -> None:
    """Replaces a deprecated value of `config` by its new name, with a note for each."""
    for key, renamed in RENAMED_VALUES.items():
        old = config.get(key)
        if isinstance(old, str) and old in renamed:
            config[key] = renamed[old]
            logging.warning(
                "%s=%r is deprecated: it is now %s=%r (the same rule).", key, old, key, renamed[old]
            )
