"""Checks of a train state before it is saved or after it is restored.

A checkpoint can restore without an error and still be wrong: random bytes written inside an
orbax data file decode to NaN/Inf or to finite garbage (values up to 3e38 in an output kernel,
here), and a resumed run then dies with a NaN loss a few steps later, every time it is
resumed. So each checkpoint's meta records a digest of every leaf (`leaf_digests`, computed
when it is saved), and `check_restored` rejects a state whose bytes are not the saved ones,
or that holds a NaN/Inf, or whose step and data position disagree, so that
`checkpoints.restore_latest` can move it aside and use the previous one.

A state of another *shape* than the run's config builds is not corruption but a changed
config: `StateShapeError` is raised instead, and the checkpoint is left where it is.
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import numpy as np


class CorruptCheckpointError(ValueError):
    """A checkpoint restored, but its state is not one a run can have saved."""


class StateShapeError(ValueError):
    """A restored state's tree or shapes differ from the config's: the config changed."""


DIGEST_KEY = "leaf_digests"  # in a checkpoint's meta: {leaf path: blake2b of its bytes}


def leaf_digests(tree: Any) -> dict[str, str]:
    """{path: 128-bit blake2b of dtype, shape and bytes} for every leaf of a host pytree.

    One pass over the state's bytes per save and per restore (24 MB took 0.8 s on the shared
    2-core machine under load, nice 19), never in the step loop.
    """
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        array = np.ascontiguousarray(np.asarray(leaf))
        digest = hashlib.blake2b(digest_size=16)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
        out[jax.tree_util.keystr(path)] = digest.hexdigest()
    return out


def nonfinite_leaves(tree: Any) -> list[str]:
    """Paths of the float leaves of `tree` holding a NaN or an Inf (host or device arrays)."""
    bad = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        array = np.asarray(leaf)
        if np.issubdtype(array.dtype, np.inexact) and not np.isfinite(array).all():
            bad.append(jax.tree_util.keystr(path))
    return bad


def check_shapes(state: Any, abstract_state: Any, *, what: str) -> None:
    """Raises `StateShapeError` unless `state` has the tree, shapes and dtypes of
    `abstract_state` (a pytree of ShapeDtypeStructs, e.g. `abstract_train_state`)."""
    got, want = jax.tree.structure(state), jax.tree.structure(abstract_state)
    if got != want:
        raise StateShapeError(
            f"{what} holds a state with another tree than this config builds ({got.num_leaves} "
            f"vs {want.num_leaves} leaves): the model or optimizer config differs from the one "
            "it was trained with."
        )
    mismatched = [
        f"{jax.tree_util.keystr(path)} {np.shape(x)} {np.asarray(x).dtype} vs "
        f"{tuple(a.shape)} {a.dtype}"
        for (path, x), a in zip(
            jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(abstract_state), strict=True
        )
        if tuple(np.shape(x)) != tuple(a.shape) or np.asarray(x).dtype != a.dtype
    ]
    if mismatched:
        raise StateShapeError(
            f"{what} holds arrays of other shapes than this config builds "
            f"({'; '.join(mismatched[:3])}): the model config differs from the one it was "
            "trained with."
        )


def check_restored(
    state: Any,
    abstract_state: Any,
    meta: dict,
    *,
    step: int,
    data_state: dict | None = None,
    batches_per_epoch: int | None = None,
) -> None:
    """Raises `CorruptCheckpointError` (or `StateShapeError`) if the state restored from the
    checkpoint of `step` cannot be the state a run saved there.

    Checked: tree, shapes and dtypes against `abstract_state`; the bytes of every leaf
    against the digests saved in `meta` (checkpoints written before digests existed skip
    this); every float leaf (params and optimizer moments) finite; the state's step equal to
    the directory's and to the one recorded in `meta`; with `data_state` and
    `batches_per_epoch`, the data position sane and consistent with the step (each
    optimizer step reads one batch, so epoch · batches_per_epoch + position = step).
    """
    where = f"checkpoint {step}"
    check_shapes(state, abstract_state, what=where)
    saved = meta.get(DIGEST_KEY)
    if saved is not None:
        changed = [k for k, v in leaf_digests(state).items() if saved.get(k) != v]
        if changed:
            raise CorruptCheckpointError(
                f"{len(changed)} arrays differ from what was saved ({', '.join(changed[:3])})"
            )
    bad = nonfinite_leaves(state)
    if bad:
        raise CorruptCheckpointError(
            f"non-finite values in {len(bad)} arrays ({', '.join(bad[:3])})"
        )
    state_step = int(np.asarray(state.step))
    if state_step != step or int(meta.get("step", step)) != step:
        raise CorruptCheckpointError(
            f"inconsistent step: directory {step}, state {state_step}, meta {meta.get('step')}"
        )
    if data_state is None or batches_per_epoch is None:
        return
    epoch, position = data_state.get("epoch"), data_state.get("position")
    if not (isinstance(epoch, int) and isinstance(position, int)):
        raise CorruptCheckpointError(f"data position is not a pair of integers: {data_state}")
    if epoch < 0 or not 0 <= position <= batches_per_epoch:
        raise CorruptCheckpointError(
            f"data position epoch {epoch}, batch {position} is outside an epoch of "
            f"{batches_per_epoch} batches"
        )
    if epoch * batches_per_epoch + position != step:
        raise CorruptCheckpointError(
            f"data position epoch {epoch}, batch {position} ({batches_per_epoch} a epoch) is "
            f"not step {step}"
        )
