"""Run every point of a sweep, each in its own workdir, as a separate training process.

Each point is launched with exactly the command `--dry_run` prints (so a cluster
scheduler can run the same lines); re-running skips finished points and resumes
unfinished ones, because `experiments.train` resumes from a workdir's last checkpoint.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_collections

from transformer_jax.sweeps import hyper

DONE_FILE = "sweep_point_done.json"
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    name: str  # directory name, derived from the overrides
    overrides: dict[str, Any]
    workdir: Path
    command: list[str]

    @property
    def done(self) -> bool:
        return (self.workdir / DONE_FILE).exists()


def load_config_module(config_spec: str) -> tuple[ModuleType, str | None]:
    """ "configs/fra_eng.py:d2l" -> (the module, "d2l")."""
    path, _, arg = config_spec.partition(":")
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"Config file {path!r} not found (from {Path.cwd()}).")
    spec = importlib.util.spec_from_file_location(f"_sweep_config_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, arg or None


def sweep_points(
    config_spec: str, sweep_name: str, sweep_dir: str | Path, extra_flags: list[str] | None = None
) -> list[SweepPoint]:
    """The points of `sweep_name` defined by the config file's `get_hyper(h, name)`."""
    module, arg = load_config_module(config_spec)
    if not hasattr(module, "get_hyper"):
        raise ValueError(
            f"{config_spec.partition(':')[0]} defines no get_hyper(h, name); add one beside "
            "get_config to describe its sweeps."
        )
    points = module.get_hyper(hyper, sweep_name)
    base = module.get_config(arg)
    for overrides in points:
        for key, value in overrides.items():
            _check_override(base, key, value)
    sweep_dir = Path(sweep_dir)
    out = []
    for overrides in points:
        name = point_name(overrides)
        workdir = sweep_dir / name
        command = [
            sys.executable,
            "-m",
            "experiments.train",
            f"--config={config_spec}",
            f"--workdir={workdir}",
        ]
        command += [f"--config.{k}={_flag_value(v)}" for k, v in overrides.items()]
        command += list(extra_flags or [])
        out.append(SweepPoint(name, dict(overrides), workdir, command))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ValueError(f"Two sweep points map to the same directory: {names}.")
    return out


def run_sweep(
    points: list[SweepPoint], *, dry_run: bool = False, timeout: float | None = None, log=print
) -> list[SweepPoint]:
    """Launch unfinished points one after another; returns the points that were run."""
    ran = []
    for i, point in enumerate(points, 1):
        line = shlex.join(point.command)
        if dry_run:
            log(line)
            continue
        if point.done:
            log(f"[{i}/{len(points)}] {point.name}: finished, skipped")
            continue
        log(f"[{i}/{len(points)}] {point.name}: {line}")
        point.workdir.mkdir(parents=True, exist_ok=True)
        start = time.time()
        with open(point.workdir / "sweep_point.log", "a", encoding="utf-8") as out:
            result = subprocess.run(
                point.command,
                cwd=REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        if result.returncode != 0:
            raise RuntimeError(
                f"Sweep point {point.name} failed (exit {result.returncode}); see "
                f"{point.workdir / 'sweep_point.log'}. Re-run the sweep to resume it."
            )
        record = {"overrides": point.overrides, "seconds": round(time.time() - start, 1)}
        (point.workdir / DONE_FILE).write_text(json.dumps(record))
        ran.append(point)
    return ran


def point_name(overrides: dict[str, Any]) -> str:
    """{"model.norm_placement": "pre", ...} -> "norm_placement=pre,..." (filesystem-safe)."""
    parts = [f"{key.rsplit('.', 1)[-1]}={value}" for key, value in overrides.items()]
    return re.sub(r"[^A-Za-z0-9=,._-]", "_", ",".join(parts)) or "default"


def _flag_value(value: Any) -> str:
    return str(value)


def _check_override(config: ml_collections.ConfigDict, key: str, value: Any) -> None:
    node = config
    *parents, leaf = key.split(".")
    for part in parents:
        if part not in node:
            raise ValueError(f"Sweep key {key!r}: no section {part!r}; valid: {sorted(node)}.")
        node = node[part]
    if leaf not in node:
        raise ValueError(f"Sweep key {key!r} is not a config key; valid here: {sorted(node)}.")
