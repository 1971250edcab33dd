"""What a sweep is: its points, each resolved as `experiments.train` resolves it, and the
records a point leaves in its workdir.

    points = sweep_points("configs/fra_eng.py:d2l", "norm_x_attention", sweep_dir)

A sweep is a config file's `get_hyper(h, name)` (`sweeps.hyper`): a list of overrides, one
per point. Each point trains in its own workdir (named by its overrides, `point_name`) with
the command `--dry_run` prints. Before anything runs, every point's config is resolved as
the train launcher will resolve it, and `--extra` may not set a key the sweep varies: every
point would train the same value while its directory and results row say otherwise. The
pre-run checks that need the points (run config validation, saved configs, the launcher's
flags) and running them are `sweeps.runner`.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import ml_collections

from transformer_jax.data.config import REPO_ROOT, is_source_checkout
from transformer_jax.runtime.atomic_files import write_text_atomically
from transformer_jax.sweeps import hyper
from transformer_jax.training.config import ConfigError
from transformer_jax.training.config_files import (
    SHIPPED_CONFIGS,
    load_config_module,
    resolve_config,
    resolve_config_path,
)

DONE_FILE = "sweep_point_done.json"
FAILED_FILE = "sweep_point_failed.json"
LOG_FILE = "sweep_point.log"
TIME_FILE = "sweep_point_time.json"  # {"seconds": all attempts so far, "attempts": n}
SAVED_CONFIG_FILE = "config.json"  # written by the training run (workdir/checkpoints.py)
DEFAULT_ROOT = Path("runs") / "sweeps"
# Each point trains in its own process: `python -m experiments.train` from a checkout, the
# installed package's module otherwise (nothing is written next to the source files).
TRAIN_MODULE = "experiments.train" if is_source_checkout() else "transformer_jax.experiments.train"
TRAIN_CWD = REPO_ROOT if is_source_checkout() else None


class SweepError(ValueError):
    """A sweep that cannot run as asked; the message names the points, keys and the fix."""


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    name: str  # directory name, derived from the overrides
    overrides: dict[str, Any]
    workdir: Path
    command: list[str]
    # The run config this point trains with, resolved as `experiments.train` resolves it.
    config: ml_collections.ConfigDict | None = None

    @property
    def done(self) -> bool:
        """Finished: its done record is there and readable (an unreadable one is run again)."""
        return read_record(self.workdir / DONE_FILE) is not None

    @property
    def failure(self) -> str | None:
        """The one-line error of this point's last failed run, None if it did not fail."""
        path = self.workdir / FAILED_FILE
        if self.done or not path.exists():
            return None
        record = read_record(path)
        if record is None or not isinstance(record.get("error"), str):
            return f"(unreadable {path}; re-run the sweep to run the point again)"
        return record["error"]


def read_record(path: Path) -> dict[str, Any] | None:
    """A sweep record's JSON object; None if the file is missing or damaged (empty, cut)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Writes beside `path` and renames into it: a record is whole or not there, even if
    the sweep is stopped while writing it."""
    write_text_atomically(path, json.dumps(record))


def default_sweep_dir(config_spec: str, sweep_name: str, root: str | Path = DEFAULT_ROOT) -> Path:
    """runs/sweeps/<config file>-<variant>/<sweep>, e.g. runs/sweeps/fra_eng-d2l/norm_x_attention.

    The base config is part of the name, so the same sweep on two variants never shares
    (and never reuses) a point's workdir.
    """
    path, _, arg = config_spec.partition(":")
    base = _safe_name(f"{Path(path).stem}-{arg or 'default'}")
    return Path(root) / base / _safe_name(sweep_name)


def sweep_points(
    config_spec: str, sweep_name: str, sweep_dir: str | Path, extra_flags: list[str] | None = None
) -> list[SweepPoint]:
    """The points of `sweep_name` defined by the config file's `get_hyper(h, name)`.

    Raises `SweepError` if `extra_flags` set a key the sweep varies, or if a point's config
    cannot be resolved (unknown key, a value of the wrong type).
    """
    module, arg = load_config_module(config_spec)  # ConfigError for a missing file
    if not hasattr(module, "get_hyper"):
        raise ValueError(
            f"{config_spec.partition(':')[0]} defines no get_hyper(h, name); add one beside "
            "get_config to describe its sweeps."
        )
    points = module.get_hyper(hyper, sweep_name)
    if not points:
        raise SweepError(
            f"Sweep {sweep_name!r} of {config_spec.partition(':')[0]} has no points: its "
            "get_hyper returned an empty list. Give it at least one h.sweep(key, values)."
        )
    check_sweep_dir(sweep_dir)
    base = module.get_config(arg or None)
    for overrides in points:
        for key, value in overrides.items():
            _check_override(base, key, value)
    extra_flags = list(extra_flags or [])
    _check_extra_flags(extra_flags, points, sweep_name)
    for flag in extra_flags:
        key = config_flag_key(flag)
        if key is not None:
            _check_override(base, key, None, where=f"--extra={flag}: key")
    sweep_dir = Path(sweep_dir)
    # The training processes may run in another directory (TRAIN_CWD): absolute paths.
    path, colon, arg = config_spec.partition(":")
    absolute_spec = f"{Path(resolve_config_path(path)).absolute()}{colon}{arg}"
    out = []
    for overrides in points:
        name = point_name(overrides)
        workdir = sweep_dir / name
        config_flags = [f"--config.{k}={_flag_value(v)}" for k, v in overrides.items()]
        command = [
            sys.executable,
            "-m",
            TRAIN_MODULE,
            f"--config={absolute_spec}",
            f"--workdir={workdir.absolute()}",
            *config_flags,
            *extra_flags,
        ]
        try:  # as `experiments.train` will resolve it
            config = resolve_config(absolute_spec, [*config_flags, *extra_flags])
        except ConfigError as error:
            raise SweepError(f"Sweep point {name}: {error}") from None
        out.append(SweepPoint(name, dict(overrides), workdir, command, config))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ValueError(f"Two sweep points map to the same directory: {names}.")
    return out


def check_sweep_dir(sweep_dir: str | Path) -> None:
    """Raises `SweepError` if `sweep_dir`, or the nearest of its parents that exists, is not
    a directory (it is created when the sweep runs)."""
    path = Path(sweep_dir)
    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                what = "is" if existing == path else f"is inside {existing}, which is"
                raise SweepError(
                    f"--sweep_dir={sweep_dir} {what} a file, not a directory: pass a directory "
                    "(created if missing)."
                )
            return


def shipped_sweeps() -> dict[str, tuple[str, ...]]:
    """The sweep names of each shipped config with a `get_hyper`, by config name, from its
    `SWEEPS` tuple (read from the source, nothing run): e.g. for `experiments.sweep --help`."""
    out = {}
    for path in sorted(SHIPPED_CONFIGS.glob("*.py")):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        if not any(isinstance(n, ast.FunctionDef) and n.name == "get_hyper" for n in body):
            continue
        for node in body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
                "SWEEPS"
            ]:
                out[path.stem] = tuple(ast.literal_eval(node.value))
    return out


def point_name(overrides: dict[str, Any]) -> str:
    """{"model.norm_placement": "pre", ...} -> "norm_placement=pre,..." (filesystem-safe)."""
    parts = [f"{key.rsplit('.', 1)[-1]}={value}" for key, value in overrides.items()]
    return _safe_name(",".join(parts)) or "default"


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9=,._-]", "_", text)


def _flag_value(value: Any) -> str:
    return str(value)


def config_flag_key(flag: str) -> str | None:
    """ "--config.model.ffn_dim=64" / "--noconfig.data.bucketing" -> the dotted key."""
    match = re.match(r"--(?:no)?config\.([^=]+)", flag)
    return match.group(1) if match else None


def _check_extra_flags(extra: list[str], points: list[dict[str, Any]], sweep_name: str) -> None:
    varied: dict[str, list[Any]] = {}
    for overrides in points:
        for key, value in overrides.items():
            varied.setdefault(key, []).append(value)
    for flag in extra:
        if not re.fullmatch(r"--?[A-Za-z_][\w.-]*(=.*)?", flag, flags=re.DOTALL):
            raise SweepError(
                f"--extra={flag!r}: give each extra flag as one --flag=value, e.g. "
                "--extra=--config.num_train_steps=5 (repeat --extra for several flags)."
            )
        if re.match(r"--(config|workdir)(=|$)", flag):
            raise SweepError(
                f"--extra={flag}: the sweep sets --config and each point's --workdir itself; "
                "pass the config to the sweep's own --config flag."
            )
        key = config_flag_key(flag)
        if key is None:
            continue
        for swept, values in varied.items():
            if key == swept or key.startswith(f"{swept}.") or swept.startswith(f"{key}."):
                shown = ", ".join(str(v) for v in dict.fromkeys(map(str, values)))
                raise SweepError(
                    f"--extra={flag} overrides {swept!r}, which sweep {sweep_name!r} varies "
                    f"({shown}): every point would train with the --extra value under its own "
                    "name. Remove it from --extra, or change the sweep in get_hyper."
                )


def _check_override(
    config: ml_collections.ConfigDict, key: str, value: Any, where: str = "Sweep key"
) -> None:
    node = config
    *parents, leaf = key.split(".")
    for part in parents:
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            valid = sorted(node) if isinstance(node, ml_collections.ConfigDict) else []
            raise ValueError(f"{where} {key!r}: no section {part!r}; valid: {valid}.")
        node = node[part]
    if not isinstance(node, ml_collections.ConfigDict) or leaf not in node:
        valid = sorted(node) if isinstance(node, ml_collections.ConfigDict) else []
        raise ValueError(f"{where} {key!r} is not a config key; valid here: {valid}.")
