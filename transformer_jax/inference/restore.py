"""Parameters only, from a run's orbax checkpoints: no optimizer is built, none is read.

A checkpoint's `state` item holds the whole TrainState (step, params, opt_state, rng); an
orbax partial restore (`PyTreeRestore(partial_restore=True)`) reads only its `params` and
`step` subtrees, so translating needs neither the optimizer config nor the memory of Adam's
two moments. Each restored tree gets the checks a training resume applies
(`state_checks`): shapes, the digests saved with the checkpoint, finiteness, the step. An
unreadable or corrupt checkpoint is logged and the previous one used (read-only: nothing is
moved), and `average_last` > 1 averages the last readable ones (`training.averaging`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp

from transformer_jax.nn import ModelConfig
from transformer_jax.training import averaging
from transformer_jax.training import checkpoints as ckpt
from transformer_jax.training.state import abstract_train_state
from transformer_jax.training.state_checks import (
    CorruptCheckpointError,
    check_shapes,
    check_step,
    nonfinite_leaves,
    require_digests,
    verify_digests,
)

# The digests of a checkpoint's meta are keyed by paths in the TrainState: ".params[...]".
_PARAMS_PATH = ".params"


def abstract_params(model_config: ModelConfig) -> Any:
    """Shapes and dtypes of the model's parameters (ShapeDtypeStructs; nothing computed)."""
    return abstract_train_state(model_config, optax.identity()).params


def read_params(manager: ocp.CheckpointManager, step: int, abstract: Any) -> tuple[Any, dict]:
    """(params as host numpy, meta) of the checkpoint of `step`, checked.

    Raises `CorruptCheckpointError` if they are not what the run saved there (digests,
    NaN/Inf, step), `StateShapeError` if the shapes are not `abstract`'s, and orbax's own
    errors if the directory cannot be read.
    """
    item = {"params": abstract, "step": jax.ShapeDtypeStruct((), np.int32)}
    restore_args = jax.tree.map(
        lambda a: ocp.RestoreArgs(restore_type=np.ndarray, dtype=a.dtype), item
    )
    restored = manager.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(
                item=item, restore_args=restore_args, partial_restore=True
            ),
            meta=ocp.args.JsonRestore(),
        ),
    )
    params, meta = restored.state["params"], restored.meta
    check_params(params, abstract, meta, step=step, state_step=int(restored.state["step"]))
    return params, meta


def check_params(params: Any, abstract: Any, meta: dict, *, step: int, state_step: int) -> None:
    """`state_checks.check_restored`, for the params subtree of a checkpoint's state."""
    check_shapes(params, abstract, what=f"checkpoint {step}")
    verify_digests(params, meta, prefix=_PARAMS_PATH)
    bad = nonfinite_leaves(params)
    if bad:
        raise CorruptCheckpointError(
            f"non-finite values in {len(bad)} arrays ({', '.join(bad[:3])})"
        )
    check_step(state_step, meta, step=step)
    require_digests(meta)


def restore_params(
    manager: ocp.CheckpointManager,
    abstract: Any,
    *,
    step: int | None = None,
    average_last: int = 1,
) -> tuple[Any, dict, tuple[int, ...]]:
    """(params, meta, averaged steps) of a run's checkpoints; raises `NoCheckpointError`.

    step: that checkpoint (an error if it is absent or corrupt), else the newest usable one
      (older ones are tried in turn). average_last > 1: the mean of the last N readable
      checkpoints ending at `step` (`averaging.last_readable`); meta is the newest one's and
      the steps ascend. Otherwise the steps are ().
    """
    directory = Path(manager.directory)
    available = sorted(manager.all_steps())
    if step is not None and step not in available:
        raise ckpt.NoCheckpointError(
            f"no checkpoint for step {step} in {directory}; available steps: {available}."
        )
    read = lambda s: read_params(manager, s, abstract)  # noqa: E731
    if average_last != 1:
        found = averaging.last_readable(manager, read, average_last, end_step=step)
        steps = tuple(sorted(s for s, _ in found))
        params = averaging.average_trees([p for _, (p, _) in reversed(found)])  # ascending
        return params, found[0][1][1], steps
    if step is not None:
        params, meta = read(step)
        return params, meta, ()
    try:
        [(_, (params, meta))] = averaging.last_readable(manager, read, 1)
    except averaging.TooFewCheckpointsError:
        workdir = directory.parent
        raise ckpt.NoCheckpointError(ckpt._no_checkpoint_message(directory, workdir)) from None
    return params, meta, ()
