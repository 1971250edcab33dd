"""The `--config=path[:arg]` and `--config.a.b=value` arguments, checked before absl parses.

ml_collections' `config_flags` loads the config file and applies the overrides while absl
parses the flags, and reports a mistake there as a long traceback (or, for a missing file,
only when the config is first read). So `launch.flags_parser` first resolves a shipped
config's name to its path (`resolve_config_args`) and checks the same things
(`check_config_args`: the file loads, every override names a key and parses as its type),
raising `ConfigError` with one line that names the bad value and the valid choices.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import ml_collections
from absl import flags

from transformer_jax.training.config import ConfigError
from transformer_jax.training.config_files import load_config_file, resolve_config_path


def resolve_config_args(argv: Sequence[str], *, config_flag: str = "config") -> list[str]:
    """`argv` with every `--config=<name>[:arg]` of a shipped config replaced by its path."""
    prefix, out = f"--{config_flag}=", list(argv)
    for i, arg in enumerate(out):
        if arg.startswith(prefix):
            path, colon, rest = arg[len(prefix) :].partition(":")
            out[i] = f"{prefix}{resolve_config_path(path)}{colon}{rest}"
        elif arg == prefix[:-1] and i + 1 < len(out):  # absl's `--config configs/x.py`
            path, colon, rest = out[i + 1].partition(":")
            out[i + 1] = f"{resolve_config_path(path)}{colon}{rest}"
    return out


def check_config_args(argv: Sequence[str], *, config_flag: str = "config") -> None:
    """Raises ConfigError for a config spec that does not load or an override that cannot apply.

    Reads `--config=path[:arg]` and every `--config.a.b=value` of `argv`, as config_flags
    will; without a `--config=` flag there is nothing to check.
    """
    prefix, specs = f"--{config_flag}=", []
    for i, arg in enumerate(argv):
        if arg.startswith(prefix):
            specs.append(arg[len(prefix) :])
        elif arg == prefix[:-1] and i + 1 < len(argv):  # absl's `--config configs/x.py`
            specs.append(argv[i + 1])
    if not specs:
        return
    config = load_config_file(specs[-1])  # absl keeps the last value
    check_overrides(config, argv, config_flag=config_flag)


def check_overrides(
    config: ml_collections.ConfigDict, argv: Sequence[str], *, config_flag: str = "config"
) -> None:
    """Raises ConfigError for `--config.a.b=value` naming no key, or a value of the wrong type.

    Numbers and booleans are parsed by absl's own parsers, as config_flags parses them.
    """
    prefix = f"--{config_flag}."
    for arg in argv:
        if not arg.startswith(prefix):
            continue
        dotted, has_value, value = arg[len(prefix) :].partition("=")
        section, path = config, []
        for key in dotted.split("."):
            if not isinstance(section, ml_collections.ConfigDict) or key not in section:
                where = ".".join(path) or "the top level"
                valid = sorted(section) if isinstance(section, ml_collections.ConfigDict) else []
                raise ConfigError(
                    f"Unknown config key {dotted!r} (in {arg!r}): {where} has no key {key!r}"
                    f"{_did_you_mean(key, valid)}. Valid keys there: {', '.join(valid)}."
                )
            section, path = section[key], [*path, key]
        if has_value:
            _check_value(arg, dotted, value, current=section)


def _check_value(arg: str, dotted: str, value: str, *, current: object) -> None:
    if isinstance(current, bool):
        parser, kind = flags.BooleanParser(), "True or False"
    elif isinstance(current, int):
        parser, kind = flags.IntegerParser(), "an integer"
    elif isinstance(current, float):
        parser, kind = flags.FloatParser(), "a number"
    else:
        return  # strings take anything; tuples and sections are parsed by config_flags
    try:
        parser.parse(value)
    except ValueError:
        raise ConfigError(
            f"{arg}: {dotted} takes {kind} (now {current!r}), got {value!r}."
        ) from None


def _did_you_mean(value: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
