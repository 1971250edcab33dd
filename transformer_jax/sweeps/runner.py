"""Run every point of a sweep, each in its own workdir, as a separate training process.

Each point is launched with exactly the command `--dry_run` prints (so a cluster
scheduler can run the same lines). Before anything runs, every point's config is resolved
as `experiments.train` will resolve it (the config file, the point's overrides, `--extra`):

- `--extra` may not set a key the sweep varies: every point would train the same value
  while its directory and results row say otherwise;
- each resolved config passes the run config validation (`validate_points`);
- a workdir that already holds a run (`config.json`) is reused, finished or resumed, only
  if its saved config equals the point's, so a sweep on another config variant or with
  other `--extra` flags never takes old results for its own (`check_saved_configs`).

A point that fails is recorded in its workdir (`sweep_point_failed.json`: the error in one
line) and the sweep goes on with the next; re-running retries it.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_collections

from transformer_jax.data.config import REPO_ROOT, is_source_checkout
from transformer_jax.sweeps import hyper
from transformer_jax.training.config import ConfigError, validate_config
from transformer_jax.training.config_files import (
    SHIPPED_CONFIGS,
    load_config_module,
    resolve_config,
    resolve_config_path,
)
from transformer_jax.workdir.config_renames import upgrade_saved
from transformer_jax.workdir.resume import config_changes

DONE_FILE = "sweep_point_done.json"
FAILED_FILE = "sweep_point_failed.json"
LOG_FILE = "sweep_point.log"
SAVED_CONFIG_FILE = "config.json"  # written by the training run (workdir/checkpoints.py)
DEFAULT_ROOT = Path("runs") / "sweeps"
# Each point trains in its own process: `python -m experiments.train` from a checkout, the
# installed package's module otherwise (nothing is written next to the source files).
TRAIN_MODULE = "experiments.train" if is_source_checkout() else "transformer_jax.experiments.train"
TRAIN_CWD = REPO_ROOT if is_source_checkout() else None
_MAX_ERROR_CHARS = 300


class SweepError(ValueError):
    """A sweep that cannot run as asked; the message names the points, keys and the fix."""


class PointFailed(RuntimeError):
    """One point's run failed; the message is one line (exit code and the log's last line)."""


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
        return (self.workdir / DONE_FILE).exists()

    @property
    def failure(self) -> str | None:
        """The one-line error of this point's last failed run, None if it did not fail."""
        path = self.workdir / FAILED_FILE
        if self.done or not path.exists():
            return None
        return json.loads(path.read_text(encoding="utf-8"))["error"]


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
    base = module.get_config(arg or None)
    for overrides in points:
        for key, value in overrides.items():
            _check_override(base, key, value)
    extra_flags = list(extra_flags or [])
    _check_extra_flags(extra_flags, points, sweep_name)
    for flag in extra_flags:
        key = _flag_key(flag)
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


def validate_points(
    points: list[SweepPoint],
    *,
    num_devices: int = 1,
    validate: Callable[..., None] | None = None,
) -> None:
    """Checks every point's run config (`training.config.validate_config`) before any runs.

    Raises `SweepError` listing every invalid point and its error.
    """
    validate = validate or validate_config
    problems = []
    for point in points:
        try:
            validate(point.config, num_devices=num_devices, process_count=1)
        except ValueError as error:
            problems.append(f"  {point.name}: {error}")
    if problems:
        raise SweepError(
            f"{len(problems)} of {len(points)} sweep point configs are invalid (nothing was "
            "run):\n" + "\n".join(problems)
        )


def saved_config_differences(point: SweepPoint) -> list[str] | None:
    """The keys on which `<workdir>/config.json` differs from the point's config, as
    "key: saved -> requested"; [] if equal, None if the workdir holds no saved config."""
    path = point.workdir / SAVED_CONFIG_FILE
    if not path.is_file():
        return None
    saved = upgrade_saved(json.loads(path.read_text(encoding="utf-8")))
    return [str(change) for change in config_changes(saved, point.config)]


def check_saved_configs(points: list[SweepPoint]) -> None:
    """Refuses to reuse (skip or resume) a point whose workdir holds a run of another config.

    Raises `SweepError` naming each such point and the keys that differ.
    """
    problems = []
    for point in points:
        differences = saved_config_differences(point)
        if differences is None and point.done:
            problems.append(
                f"  {point.name}: finished, but {point.workdir / SAVED_CONFIG_FILE} is missing, "
                "so its config cannot be compared"
            )
        elif differences:
            problems.append(f"  {point.name}: {'; '.join(differences)}")
    if problems:
        raise SweepError(
            f"{len(problems)} sweep point workdir(s) hold runs of another config (saved "
            "config.json -> this sweep's), so their results are not this sweep's:\n"
            + "\n".join(problems)
            + "\nUse another --sweep_dir (the default one names the config and variant), or "
            "delete those workdirs to run them again. Nothing was run."
        )


def run_sweep(
    points: list[SweepPoint],
    *,
    dry_run: bool = False,
    timeout: float | None = None,
    log: Callable[[str], None] = print,
    run_point: Callable[[SweepPoint, Path], None] | None = None,
) -> list[SweepPoint]:
    """Runs unfinished points one after another; returns the points that were run.

    First refuses workdirs holding another config (`check_saved_configs`). A point whose run
    raises is recorded as failed (`SweepPoint.failure`) and the sweep goes on; the caller
    decides what a failure means (`experiments.sweep` exits non-zero). `run_point(point,
    log_path)` runs one point (default: its command in a subprocess), raising on failure.
    """
    check_saved_configs(points)
    if run_point is None:

        def run_point(point: SweepPoint, log_path: Path) -> None:
            run_training_process(point, log_path, timeout)

    ran = []
    for i, point in enumerate(points, 1):
        line = shlex.join(point.command)
        if dry_run:
            log(line)
            continue
        if point.done:
            log(f"[{i}/{len(points)}] {point.name}: finished with this config, skipped")
            continue
        log(f"[{i}/{len(points)}] {point.name} (log: {point.workdir / LOG_FILE}): {line}")
        point.workdir.mkdir(parents=True, exist_ok=True)
        (point.workdir / FAILED_FILE).unlink(missing_ok=True)
        start = time.time()
        try:
            run_point(point, point.workdir / LOG_FILE)
        except Exception as error:  # noqa: BLE001 - any failure of one point is recorded
            message = _one_line(error)
            record = {"error": message, "seconds": round(time.time() - start, 1)}
            (point.workdir / FAILED_FILE).write_text(json.dumps(record), encoding="utf-8")
            log(f"[{i}/{len(points)}] {point.name}: FAILED: {message}")
        else:
            record = {"overrides": point.overrides, "seconds": round(time.time() - start, 1)}
            (point.workdir / DONE_FILE).write_text(json.dumps(record), encoding="utf-8")
        ran.append(point)
    return ran


def run_training_process(point: SweepPoint, log_path: Path, timeout: float | None = None) -> None:
    """Runs the point's command, appending its output to `log_path`; raises `PointFailed`
    with the exit code and the last line this run logged (e.g. the launcher's FATAL line)."""
    with open(log_path, "a", encoding="utf-8") as out:
        start = out.tell()
        result = subprocess.run(
            point.command,
            cwd=TRAIN_CWD,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    if result.returncode != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            last = _last_line(f.read())
        raise PointFailed(f"exit {result.returncode}: {last or 'no output'} (log: {log_path})")


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


def _one_line(error: BaseException) -> str:
    text = str(error) if isinstance(error, PointFailed) else f"{type(error).__name__}: {error}"
    line = " ".join(text.split())
    return line if len(line) <= _MAX_ERROR_CHARS else line[: _MAX_ERROR_CHARS - 1] + "…"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _flag_key(flag: str) -> str | None:
    """ "--config.model.ffn_dim=64" / "--noconfig.data.bucketing" -> the dotted key."""
    match = re.match(r"--(?:no)?config\.([^=]+)", flag)
    return match.group(1) if match else None


def _check_extra_flags(extra: list[str], points: list[dict[str, Any]], sweep_name: str) -> None:
    varied: dict[str, list[Any]] = {}
    for overrides in points:
        for key, value in overrides.items():
            varied.setdefault(key, []).append(value)
    for flag in extra:
        if re.match(r"--(config|workdir)(=|$)", flag):
            raise SweepError(
                f"--extra={flag}: the sweep sets --config and each point's --workdir itself; "
                "pass the config to the sweep's own --config flag."
            )
        key = _flag_key(flag)
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
