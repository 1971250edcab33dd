"""Starting a run from another run's parameters: `--init_from=<workdir>`.

The new run lives in its own workdir. Its first state takes the parameters of `init_from`'s
newest usable checkpoint and nothing else: a fresh optimizer state, step 0, the dropout key
of the new config's seed, the data from the start. It uses `init_from`'s tokenizers, so the
vocabulary (and the embedding shapes) stay those the parameters were trained with; the
model config must build parameters of the same shapes. Each checkpoint of the new run
records where its parameters came from (`init_from`, `init_from_step` in its meta).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax

from transformer_jax.training.state import TrainState
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir.params import load_params
from transformer_jax.workdir.state_checks import StateShapeError, check_shapes

PROVENANCE_KEYS = ("init_from", "init_from_step")  # in the meta of a fine-tune's checkpoints


class InitFromError(ValueError):
    """`init_from` is not a workdir whose parameters this run can start from."""


def check_init_from(init_from: str | Path, workdir: str | Path) -> Path:
    """`init_from` as a Path if it is another workdir with a config; else `InitFromError`."""
    source = Path(init_from)
    if source.resolve() == Path(workdir).resolve():
        raise InitFromError(
            f"--init_from={init_from} is the run's own workdir; to resume it, drop --init_from. "
            "A fine-tune needs a new --workdir."
        )
    if not (source / ckpt.CONFIG_FILE).is_file() or not (source / ckpt.TOKENIZER_DIR).is_dir():
        raise InitFromError(
            f"--init_from={init_from} is not a training workdir (no {ckpt.CONFIG_FILE} and "
            f"{ckpt.TOKENIZER_DIR}/ there): give the workdir of a trained run."
        )
    return source


def init_from_state(
    init_from: str | Path, abstract_state: TrainState, tx: optax.GradientTransformation, seed: int
) -> tuple[TrainState, int]:
    """(a step-0 host TrainState holding `init_from`'s newest params, that checkpoint's step).

    Raises `InitFromError` if `init_from` has no usable checkpoint or its parameters do not
    fit the new model config.
    """
    try:
        source = load_params(init_from)  # its parameters only
    except ckpt.NoCheckpointError as error:
        raise InitFromError(f"--init_from={init_from}: {error}") from error
    try:
        check_shapes(source.params, abstract_state.params, what=f"--init_from={init_from}")
    except StateShapeError as error:
        raise InitFromError(
            f"{error} A fine-tune keeps the model's shapes; change only keys that keep them "
            "(dropout, dtype, the data, the optimizer, ...)."
        ) from error
    params = jax.tree.map(np.asarray, source.params)
    _, dropout_rng = jax.random.split(jax.random.PRNGKey(seed))  # as create_train_state
    state = TrainState(
        step=np.asarray(0, np.int32),
        params=params,
        opt_state=jax.device_get(jax.jit(tx.init)(params)),
        rng=np.asarray(jax.device_get(dropout_rng)),
    )
    return state, source.step


def provenance(init_from: str | Path, step: int) -> dict[str, Any]:
    """What the new run's checkpoints record about where their parameters started."""
    return dict(zip(PROVENANCE_KEYS, (str(Path(init_from).absolute()), int(step)), strict=True))
