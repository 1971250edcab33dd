"""Parameters only, from a run's orbax checkpoints: no optimizer is built, none is read.

    run = load_params("runs/fra_eng")      # or step=..., average_last=3
    run.params, run.step, run.config, run.src_tokenizer, run.model_config, ...

`inference.Translator.from_workdir` and a fine-tune's `--init_from` read a run this way.

A checkpoint's `state` item holds the whole TrainState (step, params, opt_state, rng); an
orbax partial restore (`PyTreeRestore(partial_restore=True)`) reads only its `params` and
`step` subtrees, so translating needs neither the optimizer config nor the memory of Adam's
two moments. Each restored tree gets the checks a training resume applies
(`state_checks`): shapes, the digests saved with the checkpoint, finiteness, the step. An
unreadable or corrupt checkpoint is logged and the previous one used (read-only: nothing is
moved), and `average_last` > 1 averages the last readable ones (`workdir.averaging`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import flax.linen
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from transformer_jax.nn import ModelConfig, Transformer
from transformer_jax.workdir import averaging
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir.state_checks import (
    CorruptCheckpointError,
    StateShapeError,
    check_shapes,
    check_step,
    nonfinite_leaves,
    require_digests,
    verify_digests,
)

# The digests of a checkpoint's meta are keyed by paths in the TrainState: ".params[...]".
_PARAMS_PATH = ".params"


@dataclasses.dataclass(frozen=True)
class RunParams:
    """A run's parameters as its workdir stores them, with what it takes to use them."""

    config: ml_collections.ConfigDict
    model_config: ModelConfig  # training mode, as the run built it
    src_tokenizer: Any
    tgt_tokenizer: Any
    params: Any  # host numpy
    step: int  # the checkpoint's (the newest one averaged)
    averaged_steps: tuple[int, ...]  # () unless the parameters are an average
    truecaser: Any  # the run's `data.truecasing.Truecaser`, None if it saved none


def load_params(workdir: str | Path, step: int | None = None, average_last: int = 1) -> RunParams:
    """The run in `workdir`: its config, tokenizers and the parameters of its newest usable
    checkpoint (or of `step`), restored alone (`restore_params`).

    average_last > 1 averages the last N readable checkpoints ending at `step`; `step` is
    then the newest of them and `averaged_steps` lists them all (a workdir written by
    `averaging.write_averaged_checkpoint` reports the steps its checkpoint averages).
    Raises `NoCheckpointError` (saying how to train one) if there is nothing to restore.
    """
    config, src_tokenizer, tgt_tokenizer, model_config = ckpt.load_run(workdir)
    manager = ckpt.make_manager(workdir, keep=1, read_only=True)
    try:
        params, meta, steps = restore_params(
            manager, abstract_params(model_config), step=step, average_last=average_last
        )
    except StateShapeError as error:  # the checkpoints are fine: the run's files changed
        raise StateShapeError(
            f"{Path(workdir) / ckpt.CONFIG_FILE} (its model section) or {ckpt.TOKENIZER_DIR}/ "
            f"no longer match the run's checkpoints, which are intact: {error} Put back "
            "the run's own config.json and tokenizer/ (e.g. from a copy of the workdir)."
        ) from None
    finally:
        manager.close()
    ckpt.check_vocabulary_meta(meta, src_tokenizer, tgt_tokenizer)
    return RunParams(
        config=config,
        model_config=model_config,
        src_tokenizer=src_tokenizer,
        tgt_tokenizer=tgt_tokenizer,
        params=params,
        step=int(meta["step"]),
        averaged_steps=steps or tuple(int(s) for s in meta.get(averaging.AVERAGED_STEPS, ())),
        truecaser=ckpt.load_truecaser(workdir),
    )


def average_checkpoints(workdir: str | Path, last_n: int) -> tuple[Any, tuple[int, ...]]:
    """(params, steps): the mean params of the run's last `last_n` readable checkpoints.

    Reads the params only (`load_params`). `steps` ascend. Raises
    `averaging.TooFewCheckpointsError` if the workdir keeps fewer.
    """
    run = load_params(workdir, average_last=last_n)
    return run.params, run.averaged_steps


def abstract_params(model_config: ModelConfig) -> Any:
    """Shapes and dtypes of the model's parameters (ShapeDtypeStructs; nothing computed)."""
    model = Transformer(model_config.replace(deterministic=True))

    def init(rng: jax.Array) -> Any:
        src = jnp.ones((1, 2), jnp.int32)  # (B, S): shapes do not matter for the parameters
        variables = model.init({"params": rng}, src, jnp.array([2], jnp.int32), src)
        return flax.linen.unbox(variables["params"])

    return jax.eval_shape(init, jax.random.PRNGKey(0))


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
    read = lambda s: read_params(manager, s, abstract)  # noqa: E731
    if average_last != 1:  # lists the steps itself, `step` among them
        found = averaging.last_readable(manager, read, average_last, end_step=step)
        steps = tuple(sorted(s for s, _ in found))
        params = averaging.average_trees([p for _, (p, _) in reversed(found)])  # ascending
        return params, found[0][1][1], steps
    if step is not None:
        available = ckpt.list_steps(manager)  # as on disk now: a trainer may be saving
        if step not in available:
            raise ckpt.NoCheckpointError(
                f"no checkpoint for step {step} in {directory}; available steps: {available}."
            )
        params, meta = read(step)
        return params, meta, ()
    try:
        [(_, (params, meta))] = averaging.last_readable(manager, read, 1)
    except averaging.TooFewCheckpointsError:
        workdir = directory.parent
        raise ckpt.NoCheckpointError(ckpt._no_checkpoint_message(directory, workdir)) from None
    return params, meta, ()
