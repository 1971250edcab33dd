"""Checks of a train state before it is saved or after it is restored.

A checkpoint can restore without an error and still be wrong: random bytes written inside an
orbax data file decode to NaN/Inf or to finite garbage (values up to 3e38 in an output kernel,
here), and a resumed run then dies with a NaN loss a few steps later, every time it is
resumed. So each checkpoint's meta records a digest of every leaf (`leaf_digests`, computed
when it is saved), and `check_restored` rejects a state whose bytes are not the saved ones,
or that holds a NaN/Inf, or whose step and data position disagree, so that
`checkpoints.restore_latest` can move it aside and use the previous one.

A checkpoint whose meta holds no digests cannot be verified: its meta file was replaced
(`{}`), or it was saved before digests existed. It is rejected like a corrupt one unless
`TJ_ALLOW_UNDIGESTED_CHECKPOINTS=1` is set (for such an old run), because finite garbage
in its arrays would otherwise be accepted.

A state of another *shape* than the run's config builds is not corruption but a changed
config: `StateShapeError` is raised instead, and the checkpoint is left where it is.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np


class CorruptCheckpointError(ValueError):
    """A checkpoint restored, but its state is not one a run can have saved."""


class StateShapeError(ValueError):
    """A restored state's tree or shapes differ from the config's: the config changed."""


DIGEST_KEY = "leaf_digests"  # in a checkpoint's meta: {leaf path: blake2b of its bytes}
ALLOW_UNDIGESTED = "TJ_ALLOW_UNDIGESTED_CHECKPOINTS"  # =1: trust checkpoints without digests


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
    epoch_length: Callable[[int], int] | None = None,
) -> None:
    """Raises `CorruptCheckpointError` (or `StateShapeError`) if the state restored from the
    checkpoint of `step` cannot be the state a run saved there.

    Checked: tree, shapes and dtypes against `abstract_state`; the bytes of every leaf
    against the digests saved in `meta`; every float leaf (params and optimizer moments)
    finite; the state's step equal to the directory's and to the one recorded in `meta`;
    digests present at all (`require_digests`); with `data_state` and `epoch_length` (the
    batches of an epoch, which packed or bucketed plans vary by a few from epoch to epoch),
    the data position sane and consistent with the step: each optimizer step reads one
    batch, so the batches of the epochs before plus the position in this one = step (the
    former saved in the state as `batches_before`, else summed over `epoch_length`).
    """
    where = f"checkpoint {step}"
    check_shapes(state, abstract_state, what=where)
    verify_digests(state, meta)
    bad = nonfinite_leaves(state)
    if bad:
        raise CorruptCheckpointError(
            f"non-finite values in {len(bad)} arrays ({', '.join(bad[:3])})"
        )
    check_step(int(np.asarray(state.step)), meta, step=step)
    require_digests(meta)  # last: what can be checked without them is named first
    if data_state is None or epoch_length is None:
        return
    epoch, position = data_state.get("epoch"), data_state.get("position")
    before = data_state.get("batches_before")
    if not (isinstance(epoch, int) and isinstance(position, int)):
        raise CorruptCheckpointError(f"data position is not a pair of integers: {data_state}")
    if before is not None and not (isinstance(before, int) and before >= 0):
        raise CorruptCheckpointError(f"batches before its epoch not an integer >= 0: {before!r}")
    if epoch < 0 or not 0 <= position <= (length := epoch_length(epoch)):
        raise CorruptCheckpointError(
            f"data position epoch {epoch}, batch {position} is outside its epoch "
            f"({'a negative epoch' if epoch < 0 else f'{length} batches'})"
        )
    if before is None:
        before = sum(epoch_length(e) for e in range(epoch))
    if before + position != step:
        raise CorruptCheckpointError(
            f"data position epoch {epoch}, batch {position} (after {before} batches of the "
            f"epochs before) is not step {step}"
        )


def verify_digests(tree: Any, meta: Any, *, prefix: str = "") -> None:
    """Raises `CorruptCheckpointError` if a leaf of `tree` differs from its digest in `meta`.

    `prefix`: the path of `tree` inside the saved state (".params" for params alone).
    A meta without digests passes here; `require_digests` rejects it.
    """
    if not isinstance(meta, dict):
        raise CorruptCheckpointError(f"its meta is {type(meta).__name__}, not a JSON object")
    saved = meta.get(DIGEST_KEY)
    if saved is None:
        return
    if not isinstance(saved, dict):
        raise CorruptCheckpointError(f"its meta's {DIGEST_KEY} is not a JSON object")
    changed = [k for k, v in leaf_digests(tree).items() if saved.get(prefix + k) != v]
    if changed:
        raise CorruptCheckpointError(
            f"{len(changed)} arrays differ from what was saved "
            f"({', '.join(prefix + k for k in changed[:3])})"
        )


def check_step(state_step: int, meta: dict, *, step: int) -> None:
    """Raises `CorruptCheckpointError` unless the state's and the meta's step are `step`."""
    if state_step != step or meta.get("step", step) != step:
        raise CorruptCheckpointError(
            f"inconsistent step: directory {step}, state {state_step}, meta {meta.get('step')}"
        )


def require_digests(meta: dict) -> None:
    """Raises `CorruptCheckpointError` for a meta without digests, unless allowed."""
    if DIGEST_KEY in meta or os.environ.get(ALLOW_UNDIGESTED) == "1":
        return
    raise CorruptCheckpointError(
        f"its meta holds no digests of its arrays, so they cannot be verified (the meta file "
        f"was replaced, or it predates digests; to trust such checkpoints of an old run, set "
        f"{ALLOW_UNDIGESTED}=1)"
    )
