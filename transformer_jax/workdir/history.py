"""One history per workdir: `metrics.jsonl` after kills, resumes and restarts.

A run killed after its last checkpoint has logged steps that the resumed run will train
again. On resume, `truncate_metrics` drops the records of steps after the restored one
(the file is rewritten atomically), so each step appears once; TensorBoard hides its own
copies of those steps through the writer's `purge_step` (`MetricWriter`).

A run that finds an old history but no usable checkpoint asks `ever_checkpointed`. If the
old run never committed a checkpoint (it stopped before its first save: a kill, SIGTERM, an
OOM, a NaN, a full disk), there is nothing to lose beyond those steps: the history is moved
aside (`move_history_aside`) and the same command starts afresh, so a script that restarts
preempted jobs does not loop. If it had checkpoints and lost them, it is refused
(`NoUsableCheckpointError`) until `--restart_from_scratch`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from transformer_jax.runtime.atomic_files import write_text_atomically
from transformer_jax.workdir.checkpoints import (
    CHECKPOINT_DIR,
    CORRUPT_DIR,
    METRICS_FILE,
    TENSORBOARD_DIR,
)
from transformer_jax.workdir.directory import WorkdirWriteError

PREVIOUS_DIR = "previous_runs"  # <workdir>/previous_runs/<time>/: a history moved aside


class NoUsableCheckpointError(RuntimeError):
    """A workdir holds a previous run's history but none of its checkpoints is usable."""


def read_metrics(workdir: str | Path) -> list[dict[str, Any]]:
    """The records of `<workdir>/metrics.jsonl` ([] if absent); a torn last line is skipped."""
    path = Path(workdir) / METRICS_FILE
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a write cut by a kill
    return records


def last_trained_step(workdir: str | Path) -> int:
    """The highest step of a train record in metrics.jsonl, 0 if none."""
    steps = [int(r["step"]) for r in read_metrics(workdir) if r.get("split") == "train"]
    return max(steps, default=0)


def last_record(workdir: str | Path, split: str) -> dict[str, Any] | None:
    """The last record of `split` ("train" or "eval") in metrics.jsonl, or None."""
    return next((r for r in reversed(read_metrics(workdir)) if r.get("split") == split), None)


def lost_history(workdir: str | Path) -> str | None:
    """What remains of a previous run, for a workdir without a usable checkpoint; None if
    nothing does (a new workdir)."""
    workdir = Path(workdir)
    found = []
    corrupt = workdir / CORRUPT_DIR
    if corrupt.is_dir() and any(corrupt.iterdir()):
        found.append(f"{len(list(corrupt.iterdir()))} unusable checkpoint(s) in {corrupt}")
    step = last_trained_step(workdir)
    if step:
        found.append(f"{workdir / METRICS_FILE} up to step {step}")
    return "; ".join(found) or None


def ever_checkpointed(workdir: str | Path) -> bool:
    """Whether a run in `workdir` ever committed a checkpoint, usable or not.

    orbax commits a save by renaming its temporary directory
    (`<step>.orbax-checkpoint-tmp...`) to `<step>/` once everything is written, and
    `restore_latest` moves an unusable one to `checkpoints_corrupt/`: so a committed
    checkpoint leaves a directory named by a number in `checkpoints/`, or an entry in
    `checkpoints_corrupt/`. The file system says it, not a record that a kill could cut
    short. (Checkpoints deleted by hand thus count as never saved: the history is moved
    aside, not deleted.)
    """
    workdir = Path(workdir)
    corrupt = workdir / CORRUPT_DIR
    if corrupt.is_dir() and any(corrupt.iterdir()):
        return True
    checkpoints = workdir / CHECKPOINT_DIR
    return checkpoints.is_dir() and any(p.name.isdigit() for p in checkpoints.iterdir())


def truncate_metrics(workdir: str | Path, step: int) -> int:
    """Drops the records of steps after `step` from metrics.jsonl; returns how many.

    Rewrites the file atomically (a kill leaves the old or the new file, never half of one).
    """
    path = Path(workdir) / METRICS_FILE
    if not path.is_file():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a torn line of a killed write: dropped too
        if int(record.get("step", 0)) <= step:
            kept.append(line)
    dropped = len(lines) - len(kept)
    if dropped:
        try:
            write_text_atomically(path, "".join(f"{line}\n" for line in kept))
        except OSError as error:  # a full disk: metrics.jsonl is as it was
            raise WorkdirWriteError.failed(error, path.parent, f"Rewriting {path}") from error
    return dropped


def move_history_aside(workdir: str | Path) -> Path | None:
    """Moves metrics.jsonl, tensorboard/ and checkpoints_corrupt/ to
    `<workdir>/previous_runs/<unix time>/`; returns that directory (None if nothing moved)."""
    workdir = Path(workdir)
    names = (METRICS_FILE, TENSORBOARD_DIR, CORRUPT_DIR)
    present = [workdir / name for name in names if (workdir / name).exists()]
    if not present:
        return None
    target = workdir / PREVIOUS_DIR / str(int(time.time()))
    target.mkdir(parents=True, exist_ok=True)
    for path in present:
        shutil.move(str(path), str(target / path.name))
    return target
