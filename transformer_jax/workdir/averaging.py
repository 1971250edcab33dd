"""Checkpoint averaging: the element-wise mean of the parameters of a run's last N checkpoints.

Averaging the last few checkpoints of a run smooths the noise of the final optimizer steps
and usually gains a little BLEU for free (Vaswani et al. 2017, §6.1: the base models average
the last 5 checkpoints, the big ones the last 20; fairseq's `scripts/average_checkpoints.py`,
tensor2tensor's `avg_checkpoints.py`).

    params, steps = params.average_checkpoints(workdir, last_n=3)  # `workdir.params`
    Translator.from_workdir(workdir, average_last=3)       # the same, as a translator
    write_averaged_checkpoint(workdir, 3, output_workdir,  # a workdir evaluate/translate read
                              abstract_state=training.state.abstract_run_state(workdir))

An averaged workdir keeps the newest checkpoint's optimizer state, whose tree only the
training layer knows: its caller passes the abstract state (`training.state.abstract_run_state`).
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir.read_noise import quiet_failed_reads
from transformer_jax.workdir.state_checks import StateShapeError, check_restored

R = TypeVar("R")

AVERAGED_STEPS = "averaged_steps"  # meta key of a checkpoint written by this module
_DIFFERENT_CONFIGS = (
    "The checkpoints come from different model configs; average only checkpoints of one run."
)


class TooFewCheckpointsError(ckpt.NoCheckpointError):
    """The workdir keeps fewer readable checkpoints than the average asks for."""


# --- pure: the mean of parameter trees -----------------------------------------------------


def average_trees(trees: Sequence[Any]) -> Any:
    """Element-wise mean of pytrees with one structure, as host numpy arrays.

    Sums in float64 (so that the mean of N bfloat16 or float32 leaves is the exactly rounded
    mean, and N identical trees give that tree back bit for bit) and casts each leaf back to
    its own dtype. Raises ValueError naming the first path where a tree differs from the
    first one (a missing or extra leaf, or another shape or dtype).
    """
    if not trees:
        raise ValueError("average_trees needs at least one tree; got an empty sequence.")
    reference, treedef = jax.tree_util.tree_flatten_with_path(trees[0])
    paths = [path for path, _ in reference]
    total = [np.array(leaf, dtype=np.float64) for _, leaf in reference]  # copies
    for i, tree in enumerate(trees[1:], start=1):
        leaves, other_def = jax.tree_util.tree_flatten_with_path(tree)
        _check_same_paths(paths, [path for path, _ in leaves], i)
        if other_def != treedef:  # same leaf paths in other containers (e.g. dict vs dataclass)
            raise ValueError(
                f"tree {i} has the structure {other_def}, tree 0 has {treedef}. "
                + _DIFFERENT_CONFIGS
            )
        for (path, leaf), (_, first), acc in zip(leaves, reference, total, strict=True):
            leaf = np.asarray(leaf)
            if leaf.shape != np.shape(first) or leaf.dtype != np.asarray(first).dtype:
                raise ValueError(
                    f"parameter {jax.tree_util.keystr(path)} is {_describe(first)} in tree 0 "
                    f"but {_describe(leaf)} in tree {i}. " + _DIFFERENT_CONFIGS
                )
            acc += leaf
    mean = [
        (acc / len(trees)).astype(np.asarray(first).dtype)
        for acc, (_, first) in zip(total, reference, strict=True)
    ]
    return jax.tree_util.tree_unflatten(treedef, mean)


def _check_same_paths(expected: list, got: list, index: int) -> None:
    """Raises ValueError at the first leaf path (in tree 0's order) where the trees differ."""
    for a, b in zip(expected, got, strict=False):
        if a != b:
            raise ValueError(
                f"tree {index} has a leaf at {jax.tree_util.keystr(b)} where tree 0 has "
                f"{jax.tree_util.keystr(a)}. " + _DIFFERENT_CONFIGS
            )
    if len(expected) != len(got):
        longer, which = (expected, "tree 0") if len(expected) > len(got) else (got, f"tree {index}")
        path = jax.tree_util.keystr(longer[min(len(expected), len(got))])
        raise ValueError(
            f"only {which} has the parameter {path} ({len(expected)} leaves in tree 0, "
            f"{len(got)} in tree {index}). " + _DIFFERENT_CONFIGS
        )


def _describe(leaf: Any) -> str:
    leaf = np.asarray(leaf)
    return f"{leaf.dtype}{list(leaf.shape)}"


# --- restoring the last N checkpoints ----------------------------------------------------


def last_readable(
    manager: ocp.CheckpointManager,
    read: Callable[[int], R],
    last_n: int,
    *,
    end_step: int | None = None,
) -> list[tuple[int, R]]:
    """[(step, read(step))] of the newest `last_n` checkpoints that `read` accepts, newest
    first, up to `end_step` if given.

    `read` restores (and checks) one step; a checkpoint it raises on is logged in one line
    and skipped (read-only: nothing is moved), and orbax's echo of the failed read is
    silenced (`read_noise`). A `StateShapeError` is raised: the run's config no longer
    builds its checkpoints' shapes, which is no corruption of any one of them.

    A trainer may be rotating the checkpoints while they are read (it deletes the oldest
    after each save): a read that fails because its checkpoint vanished, or while a newer
    one appeared, is no corruption either; the steps are listed again and read from the
    newest (`_rotated`). Raises `TooFewCheckpointsError` if fewer than `last_n` remain.
    """
    if last_n < 1:
        raise ValueError(f"average_last/last_n={last_n}; use 1 (no averaging) or more.")
    directory = Path(manager.directory)
    failed = False
    with quiet_failed_reads() as quiet:
        try:
            patience = time.monotonic() + _ROTATION_PATIENCE_S
            for attempt in itertools.count():
                available = ckpt.list_steps(manager)
                if end_step is not None and end_step not in available:
                    raise ckpt.NoCheckpointError(
                        f"no checkpoint for step {end_step} in {directory}; available steps: "
                        f"{available}."
                    )
                candidates = [s for s in available if end_step is None or s <= end_step]
                found: list[tuple[int, R]] = []
                rotated = False
                for step in reversed(candidates):  # newest first: a damaged old one costs nothing
                    try:
                        found.append((step, read(step)))
                    except StateShapeError:
                        raise
                    except Exception as error:  # orbax raises many types for a damaged directory
                        # Its abandoned reads echo later, a rotated checkpoint's too (a reader
                        # racing a run logged "Task exception was never retrieved" after this).
                        failed = True
                        if _rotated(manager, step, newest=available[-1]):
                            logging.info(
                                "Checkpoint %s changed while it was read (the run is saving "
                                "newer ones); reading the newest again.",
                                directory / str(step),
                            )
                            rotated = True
                            break
                        logging.error(
                            "Checkpoint %s is corrupt or unusable (%s: %s); left in place; trying "
                            "the previous one.",
                            directory / str(step),
                            type(error).__name__,
                            ckpt.one_line(error),
                        )
                        continue
                    if len(found) == last_n:
                        return found
                # Outrun by the saves: again, for a while (a loaded machine reads slowly).
                if not rotated or (
                    attempt + 1 >= _ROTATION_RETRIES and time.monotonic() > patience
                ):
                    break
        finally:
            if failed:  # late echoes of the reads orbax abandoned, while still silenced
                quiet.drain(quiet_for=0.5, limit=5.0)
    up_to = f" up to step {end_step}" if end_step is not None else ""
    steps = sorted(s for s, _ in found)
    raise TooFewCheckpointsError(
        f"cannot average the last {last_n} checkpoints: {directory} has only "
        f"{len(found)} readable{up_to} (steps {steps}). A run keeps its last "
        f"`keep_checkpoints` (default 3) checkpoints: average at most {len(found)} here, "
        f"or train the next run with --config.keep_checkpoints={last_n} or more."
    )


# A reader slower than the trainer's saves could be outrun forever: it tries at least this
# many rounds (a new save during each read) and for at least this long, then gives up with
# TooFewCheckpointsError. Under load (a test suite beside a run saving every step) 10
# rounds were not enough; a minute outlasts a short run.
_ROTATION_RETRIES = 10
_ROTATION_PATIENCE_S = 60.0


def _rotated(manager: ocp.CheckpointManager, step: int, *, newest: int) -> bool:
    """Whether a failed read of `step` is explained by the trainer's rotation: the step is
    gone from disk, or a step newer than `newest` (the newest when the read began) exists."""
    if not (Path(manager.directory) / str(step)).exists():
        return True
    steps = ckpt.list_steps(manager)
    return step not in steps or (bool(steps) and steps[-1] > newest)


def restore_averaged(
    manager: ocp.CheckpointManager,
    abstract_state: Any,
    last_n: int,
    *,
    end_step: int | None = None,
) -> tuple[tuple[Any, dict, dict], tuple[int, ...]]:
    """((state, data_state, meta), steps): the newest of the last `last_n` readable
    checkpoints (up to `end_step` if given) with its params replaced by their average.

    The rest of the state (step, opt_state, rng) and the data position are the newest
    checkpoint's; `steps` ascend. Each state is checked as a resume checks it
    (`state_checks.check_restored`). Used to write an averaged workdir, which needs the
    whole state; translating needs only the params (`params.restore_params`).
    """

    def read(step: int) -> tuple[Any, dict, dict]:
        state, data, meta = ckpt._restore(manager, step, abstract_state)
        check_restored(state, abstract_state, meta, step=step)
        return state, data, meta

    found = last_readable(manager, read, last_n, end_step=end_step)
    state, data, meta = found[0][1]
    params = average_trees([s.params for _, (s, _, _) in reversed(found)])  # ascending steps
    return (state.replace(params=params), data, meta), tuple(sorted(s for s, _ in found))


# --- writing an averaged workdir ---------------------------------------------------------


def write_averaged_checkpoint(
    workdir: str | Path, last_n: int, output_workdir: str | Path, *, abstract_state: Any
) -> Path:
    """Writes a new workdir holding the average of `workdir`'s last `last_n` checkpoints.

    `abstract_state`: the shapes of the run's whole TrainState, model and optimizer
    (`training.state.abstract_run_state(workdir)`). `output_workdir` gets the run's
    config.json and tokenizer/ and one checkpoint at the newest averaged step: the averaged
    params, the newest checkpoint's step, opt_state, rng and data position, and
    `"averaged_steps": [...]` in its meta. `experiments.evaluate` and
    `experiments.translate` read it as any workdir. Returns `output_workdir`.

    `output_workdir` must not exist or be an empty directory: a ValueError names a file, the
    input workdir, or a directory with anything in it (an export's config.json was once
    overwritten). Nothing is left beside it on failure (the staging folder is removed).
    """
    workdir, output = Path(workdir), Path(output_workdir)
    _check_output(workdir, output, last_n)
    config = ckpt.load_config(workdir)
    manager = ckpt.make_manager(workdir, keep=max(1, config.keep_checkpoints), read_only=True)
    try:
        (state, data, meta), steps = restore_averaged(manager, abstract_state, last_n)
    finally:
        manager.close()

    # Written aside, then renamed into place: a failure leaves no half-written output to
    # refuse on the next try, and no staging folder (removed on any error; one left by a
    # killed try is cleared first).
    staging = output.parent / f".{output.name}.partial"
    _remove(staging)
    try:
        staging.mkdir(parents=True)
        shutil.copy2(workdir / ckpt.CONFIG_FILE, staging / ckpt.CONFIG_FILE)
        shutil.copytree(workdir / ckpt.TOKENIZER_DIR, staging / ckpt.TOKENIZER_DIR)
        config = ckpt.load_config(staging)
        manager = ckpt.make_manager(staging, keep=max(1, config.keep_checkpoints))
        try:
            ckpt.save_checkpoint(manager, state, data, {**meta, AVERAGED_STEPS: list(steps)})
            manager.wait_until_finished()
        finally:
            manager.close()
        _check_output(workdir, output, last_n)  # made while we wrote: keep it, drop ours
        if output.is_dir():  # empty (checked): the rename needs it gone
            output.rmdir()
        staging.rename(output)
    finally:
        _remove(staging)  # gone already after the rename
    return output


def _check_output(workdir: Path, output: Path, last_n: int) -> None:
    """A ValueError unless `output` is absent or an empty directory other than `workdir`."""
    if output.resolve() == workdir.resolve():
        raise ValueError(
            f"output_workdir is the input workdir {workdir}; averaged params would mix with the "
            "run's own checkpoints. Choose another directory, e.g. "
            f"{workdir.name}_avg{last_n}."
        )
    if output.exists() and not output.is_dir():
        raise ValueError(
            f"output_workdir {output} is a file, not a directory; the average is written as "
            f"a new workdir: choose a new --output_workdir, e.g. {workdir}_avg{last_n}."
        )
    existing = output / ckpt.CHECKPOINT_DIR
    if existing.is_dir() and any(existing.iterdir()):
        raise ValueError(
            f"{existing} already has checkpoints; refusing to add an averaged one to them. "
            "Delete it or choose another output_workdir."
        )
    if output.is_dir() and any(output.iterdir()):
        raise ValueError(
            f"output_workdir {output} already exists and is not empty; the average is written "
            "as a new workdir, never into other files (an export, a run): choose a new "
            "--output_workdir, or an empty directory."
        )


def _remove(path: Path) -> None:
    """Deletes `path` (a staging folder of ours) if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
