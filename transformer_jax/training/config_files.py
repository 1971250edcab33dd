"""Run config files: a shipped config's name or a path (+ `:arg`) -> `get_config(arg)`.

    load_config_file("configs/fra_eng.py:deep_sampled")  # a path, as `--config=` takes it
    load_config_file("fra_eng:d2l")                # a shipped config, from any directory
    resolve_config("fra_eng:d2l", ["--config.seed=1"])  # with overrides, as the launcher

The launchers (`transformer_jax.launch`, through absl's config flag), the sweeps and the
benchmarks resolve config files here. Mistakes raise `ConfigError`, one line naming the bad
value and the choices.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import ml_collections
from absl import flags
from ml_collections import config_flags

from transformer_jax.training.config import ConfigError

_PACKAGE = Path(__file__).resolve().parents[1]  # transformer_jax/


def _shipped_configs() -> Path:
    """The shipped config files: `transformer_jax/configs/` in an installed package (pyproject
    maps the repository's configs/ there), else the checkout's `configs/`."""
    installed = _PACKAGE / "configs"
    return installed if installed.is_dir() else _PACKAGE.parent / "configs"


SHIPPED_CONFIGS = _shipped_configs()


def resolve_config_path(path: str) -> str:
    """A config file path, or the name of a shipped config (`fra_eng`, `fra_eng.py`) -> its path.

    A path that exists wins, so a local file shadows a shipped config of the same name;
    a bare name works from any directory, also with an installed package.
    """
    if Path(path).is_file() or "/" in path or "\\" in path:
        return path
    shipped = SHIPPED_CONFIGS / (path if path.endswith(".py") else f"{path}.py")
    return str(shipped) if shipped.is_file() else path


def load_config_module(spec: str) -> tuple[ModuleType, str]:
    """`path/to/config.py[:arg]` -> (the file run as a module, `arg`): the one loader of config
    files, for its `get_config(arg)` (`load_config_file`) and a sweep's `get_hyper`.

    Raises ConfigError for a missing file (listing the shipped configs).
    """
    path, _, arg = spec.partition(":")
    path = resolve_config_path(path) if path else path
    if not path:
        raise ConfigError(f"--config={spec!r} names no file; {_config_choices()}.")
    if not Path(path).is_file():
        raise ConfigError(
            f"config file {path!r} not found (from {Path.cwd()}); {_config_choices()}."
        )
    module_spec = importlib.util.spec_from_file_location("_run_config", path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"config file {path!r} is not a Python file; {_config_choices()}.")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module, arg


def load_config_file(spec: str) -> ml_collections.ConfigDict:
    """`path/to/config.py[:arg]` -> `get_config(arg)`, as ml_collections' `--config` flag does.

    Raises ConfigError for a missing file (listing the shipped configs) or an argument the
    config's `get_config` rejects (its ValueError names the variants).
    """
    module, arg = load_config_module(spec)
    try:
        config = module.get_config(arg) if arg else module.get_config()
    except ValueError as error:  # a variant typo: the config names its variants
        raise ConfigError(f"--config={spec}: {' '.join(str(error).split())}") from None
    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError(
            f"{module.__file__}: get_config() returned {type(config).__name__}, not a ConfigDict."
        )
    return config


def resolve_config(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """The run config `experiments.train --config=<spec> <overrides>` trains with.

    `overrides` are `--config.KEY=VALUE` (`--noconfig.KEY` for False), the one override
    syntax, applied by ml_collections' config flag as the launcher applies them: each value
    takes the type of the key (a tuple from "(8, 16)" or "8,16"), as in the `config.json` a
    run saves. Other flags among `overrides` change nothing here. Raises ConfigError.
    """
    config = load_config_file(spec)
    argv = ["resolve_config", *(f for f in overrides if re.match(r"--(no)?config\.", f))]
    values = flags.FlagValues()
    config_flags.DEFINE_config_dict(
        "config", config, flag_values=values, lock_config=True, sys_argv=argv
    )
    try:
        values(argv)
    except (AttributeError, KeyError) as error:  # a key the config does not have
        raise ConfigError(f"unknown config key in {argv[1:]}: {error}") from None
    except flags.Error as error:  # a value of the wrong type, e.g. --config.seed=two
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise ConfigError(lines[-1] if lines else type(error).__name__) from None
    return values.config


def _config_choices() -> str:
    """What `--config=` takes, with the names of the shipped configs."""
    # model.py holds the model sections that run configs import, not a run config itself.
    shipped = sorted(
        p.stem
        for p in SHIPPED_CONFIGS.glob("*.py")
        if not p.name.startswith("_") and p.name != "model.py"
    )
    return (
        f"give a config file path or a shipped config's name, one of {shipped} "
        "(with ':variant' if it has variants, e.g. --config=fra_eng:deep_sampled)"
    )
