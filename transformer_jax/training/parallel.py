"""How the per-device steps are mapped over devices: the one place that knows.

`pmap` (the design's choice): state replicated with a leading device axis, batches shaped
(D_local, B_dev, ...). `shard_map` (JAX's successor): `jax.jit(jax.shard_map(...))` over a
1-D mesh of all devices; state is a replicated global array, the batch a global array
(D · B_dev, ...) sharded on its leading axis. Both run the same step functions, with the
same axis name, and on several processes (each passes only its local devices' data).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

PARALLELISMS = ("pmap", "shard_map")
AXIS = "data"


@dataclasses.dataclass(frozen=True)
class DataParallel:
    """Maps steps and moves state/batches between host (numpy) and devices."""

    kind: str
    mesh: Mesh

    @classmethod
    def create(cls, kind: str) -> DataParallel:
        if kind not in PARALLELISMS:
            raise ValueError(f"parallelism={kind!r}; choose one of {PARALLELISMS}.")
        return cls(kind=kind, mesh=Mesh(np.array(jax.devices()), (AXIS,)))

    @property
    def num_local_devices(self) -> int:
        return jax.local_device_count()

    # --- mapping -------------------------------------------------------------------------
    def map_train_step(self, step_fn: Callable) -> Callable:
        """(state, batch) -> (state, metrics); the state argument is donated."""
        fn = functools.partial(step_fn, axis_name=AXIS)
        if self.kind == "pmap":
            return jax.pmap(fn, axis_name=AXIS, donate_argnums=(0,))
        mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P()))
        return jax.jit(mapped, donate_argnums=(0,))

    def map_train_steps(self, steps_fn: Callable) -> Callable:
        """(state, batches) -> (state, metrics) for `train_steps`: batches carry a leading
        steps axis N after the device axis, host (D_local, N, B_dev, ...)."""
        fn = functools.partial(steps_fn, axis_name=AXIS)
        if self.kind == "pmap":
            return jax.pmap(fn, axis_name=AXIS, donate_argnums=(0,))
        specs = (P(), P(None, AXIS))
        mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=specs, out_specs=(P(), P()))
        return jax.jit(mapped, donate_argnums=(0,))

    def map_eval_step(self, step_fn: Callable) -> Callable:
        """(params, batch) -> metrics."""
        fn = functools.partial(step_fn, axis_name=AXIS)
        if self.kind == "pmap":
            return jax.pmap(fn, axis_name=AXIS)
        return jax.jit(jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(AXIS)), out_specs=P()))

    # --- host <-> device ---------------------------------------------------------------
    def put_replicated(self, tree: Any) -> Any:
        """Host pytree -> replicated on devices (pmap: leading local-device axis)."""
        if self.kind == "pmap":
            # One copy per local device, through pmap itself: the arrays then carry exactly
            # the sharding of the step's outputs, so the donated state never forces a retrace.
            n = jax.local_device_count()
            stacked = jax.tree.map(lambda x: np.broadcast_to(x, (n,) + np.shape(x)), tree)
            return jax.pmap(lambda x: x, axis_name=AXIS)(stacked)
        sharding = NamedSharding(self.mesh, P())
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree
        )

    def put_batch(self, batch: dict[str, np.ndarray]) -> Any:
        """Host batch with leaves (D_local, B_dev, ...) -> device batch for the mapped step."""
        if self.kind == "pmap":
            return batch  # pmap shards the leading axis over the local devices itself
        sharding = NamedSharding(self.mesh, P(AXIS))
        return {
            k: jax.make_array_from_process_local_data(sharding, v.reshape((-1,) + v.shape[2:]))
            for k, v in batch.items()
        }

    def put_batches(self, batches: list[dict[str, np.ndarray]]) -> Any:
        """N host batches (D_local, B_dev, ...) -> one stacked device batch for `train_steps`."""
        stacked = {k: np.stack([b[k] for b in batches], axis=1) for k in batches[0]}
        if self.kind == "pmap":
            return stacked  # (D_local, N, B_dev, ...)
        sharding = NamedSharding(self.mesh, P(None, AXIS))
        return {
            k: jax.make_array_from_process_local_data(
                sharding, np.swapaxes(v, 0, 1).reshape(v.shape[1], -1, *v.shape[3:])
            )  # (N, D_local · B_dev, ...)
            for k, v in stacked.items()
        }

    def get_replicated(self, tree: Any) -> Any:
        """Replicated device pytree (state or metrics) -> one host (numpy) copy."""
        pmap = self.kind == "pmap"

        def first_copy(x: Any) -> np.ndarray:
            data = np.asarray(x.addressable_shards[0].data)  # copy on the first local device
            return data[0] if pmap else data  # pmap: (1, ...) -> (...)

        return jax.tree.map(first_copy, tree)
