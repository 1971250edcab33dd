"""How the per-device steps are mapped over devices: the one place that knows devices.

The input pipeline yields per-process host batches, leaves (B_proc, ...) (each process its
contiguous slice of the global batch); `put_batch` alone splits them over the devices.
`pmap` (the design's choice): the state unmapped (`in_axes=None`, one replicated array
per leaf), batches reshaped to (D_local, B_dev, ...) and mapped over the local devices.
`shard_map` (JAX's successor): `jax.jit(jax.shard_map(...))` over a 1-D mesh of all
devices; state is a replicated global array, the batch a global array
(processes · B_proc, ...) sharded on its leading axis. Both run the same step functions,
with the same axis name, and on several processes (each passes only its own rows).
B_dev = B_proc / D_local rows reach each device either way.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from transformer_jax.runtime.axes import DATA_AXIS

PARALLELISMS = ("pmap", "shard_map")


@dataclasses.dataclass(frozen=True)
class DataParallel:
    """Maps steps and moves state/batches between host (numpy) and devices."""

    kind: str
    mesh: Mesh

    @classmethod
    def create(cls, kind: str) -> DataParallel:
        if kind not in PARALLELISMS:
            raise ValueError(f"parallelism={kind!r}; choose one of {PARALLELISMS}.")
        return cls(kind=kind, mesh=Mesh(np.array(jax.devices()), (DATA_AXIS,)))

    @property
    def num_local_devices(self) -> int:
        """D_local: a per-process batch's rows must be a multiple of it (`put_batch`)."""
        return jax.local_device_count()

    # --- mapping -------------------------------------------------------------------------
    def map_train_step(self, step_fn: Callable) -> Callable:
        """(state, batch) -> (state, metrics); the state argument is donated."""
        fn = functools.partial(step_fn, axis_name=DATA_AXIS)
        if self.kind == "pmap":
            return _pmap_replicated_state(fn, donate=True)
        mapped = jax.shard_map(
            fn, mesh=self.mesh, in_specs=(P(), P(DATA_AXIS)), out_specs=(P(), P())
        )
        return jax.jit(mapped, donate_argnums=(0,))

    def map_train_steps(self, steps_fn: Callable) -> Callable:
        """(state, batches) -> (state, metrics) for `train_steps`: the device batches of
        `put_batches`, with a steps axis N (metrics come back stacked, (N,))."""
        fn = functools.partial(steps_fn, axis_name=DATA_AXIS)
        if self.kind == "pmap":
            return _pmap_replicated_state(fn, donate=True)
        specs = (P(), P(None, DATA_AXIS))
        mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=specs, out_specs=(P(), P()))
        return jax.jit(mapped, donate_argnums=(0,))

    def map_eval_step(self, step_fn: Callable) -> Callable:
        """(params, batch) -> metrics."""
        fn = functools.partial(step_fn, axis_name=DATA_AXIS)
        if self.kind == "pmap":
            return _pmap_replicated_state(fn, donate=False)
        return jax.jit(
            jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(DATA_AXIS)), out_specs=P())
        )

    # --- host <-> device ---------------------------------------------------------------
    def put_replicated(self, tree: Any) -> Any:
        """Host pytree -> one array per leaf, replicated on every device."""
        if self.kind == "pmap":
            # Through a pmap itself: the arrays then carry exactly the sharding of the
            # step's outputs, so the donated state never forces a retrace.
            lanes = np.zeros(jax.local_device_count(), np.int32)
            return _replicate()(tree, lanes)
        sharding = NamedSharding(self.mesh, P())
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree
        )

    def put_batch(self, batch: dict[str, np.ndarray]) -> Any:
        """Per-process host batch, leaves (B_proc, ...) -> device batch for the mapped step.

        pmap: numpy (D_local, B_dev, ...), which pmap shards over the local devices itself.
        shard_map: global arrays (processes · B_proc, ...) sharded on the leading axis.
        """
        if self.kind == "pmap":
            return {k: self._split_rows(k, v) for k, v in batch.items()}
        sharding = NamedSharding(self.mesh, P(DATA_AXIS))
        return {
            k: jax.make_array_from_process_local_data(sharding, self._check_rows(k, v))
            for k, v in batch.items()
        }

    def put_batches(self, batches: list[dict[str, np.ndarray]]) -> Any:
        """N per-process host batches (B_proc, ...) -> one device batch for `train_steps`.

        pmap: numpy (D_local, N, B_dev, ...). shard_map: global arrays
        (N, processes · B_proc, ...) sharded on the rows axis.
        """
        if self.kind == "pmap":
            return {
                k: np.stack([self._split_rows(k, b[k]) for b in batches], axis=1)
                for k in batches[0]
            }  # (D_local, N, B_dev, ...)
        sharding = NamedSharding(self.mesh, P(None, DATA_AXIS))
        return {
            k: jax.make_array_from_process_local_data(
                sharding, np.stack([self._check_rows(k, b[k]) for b in batches])
            )  # (N, B_proc, ...) per process
            for k in batches[0]
        }

    def _check_rows(self, key: str, value: np.ndarray) -> np.ndarray:
        """`value` (B_proc, ...) unchanged if its rows split evenly over the local devices."""
        devices = self.num_local_devices
        if np.ndim(value) == 0 or np.shape(value)[0] % devices:
            raise ValueError(
                f"batch[{key!r}] has shape {np.shape(value)}: a per-process batch (B_proc, ...) "
                f"needs a multiple of the {devices} local devices as rows. Make "
                f"data.batch_size a multiple of processes · devices = "
                f"{jax.process_count() * devices}."
            )
        return value

    def _split_rows(self, key: str, value: np.ndarray) -> np.ndarray:
        """(B_proc, ...) -> (D_local, B_dev, ...): contiguous rows per device, in order."""
        value = np.asarray(self._check_rows(key, value))
        return value.reshape((self.num_local_devices, -1) + value.shape[1:])

    def get_replicated(self, tree: Any) -> Any:
        """Replicated device pytree (state or metrics) -> one host (numpy) copy."""

        def first_copy(x: Any) -> np.ndarray:
            return np.asarray(x.addressable_shards[0].data)  # copy on the first local device

        return jax.tree.map(first_copy, tree)


def _pmap_replicated_state(fn: Callable, donate: bool) -> Callable:
    """`jax.pmap` of fn(state, batch) with the state (and every output) unmapped.

    The state enters as one replicated array per leaf (`in_axes=None`), not stacked
    with a leading device axis, and the outputs (new state, psum'd metrics) leave the
    same way (`out_axes=None`: they are identical on every device). With a stacked state,
    pmap squeezes the device axis off every donated buffer, and XLA:CPU copied them at
    entry: the compiled `small` step had 394 entry copies, 54 this way (step 629 -> 603
    ms in turns; benchmarks/LOG.md).
    """
    mapped = jax.pmap(
        fn,
        axis_name=DATA_AXIS,
        in_axes=(None, 0),
        out_axes=None,
        donate_argnums=(0,) if donate else (),
    )
    _release_with(mapped, fn)
    return mapped


def _identity(tree: Any, _lane: Any) -> Any:
    return tree


@functools.cache
def _replicate() -> Callable:
    """The pmapped identity of `put_replicated`: one per process (its programs, one per
    state structure, are traced and compiled once, not at every call)."""
    return _pmap_replicated_state(_identity, donate=False)


def _release_with(mapped: Callable, fn: Callable) -> None:
    """Drops JAX's cached programs of `jax.pmap(fn)` when `mapped` is garbage-collected.

    JAX 0.10 builds pmap on shard_map and caches each function's traced and compiled
    programs in a `WeakKeyDictionary` keyed by `fn` whose entries reference `fn` (the
    cache `jax._src.pmap._cached_shard_map`), so no entry ever goes: every run in one
    process (a notebook, a script of several runs, the tests) kept its train and eval steps'
    jaxprs and executables, ~50 MB a tiny run on CPU. `jax.jit` has no such cycle. Where a
    JAX version lacks that module, cache or its `evict_function`, nothing is registered.
    """
    try:
        from jax._src import pmap as jax_pmap  # private: read defensively
    except ImportError:
        return
    evict = getattr(getattr(jax_pmap, "_cached_shard_map", None), "evict_function", None)
    if callable(evict):
        weakref.finalize(mapped, evict, fn)
