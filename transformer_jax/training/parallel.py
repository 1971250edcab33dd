"""How the per-device steps are mapped over devices: the one place that knows.

`pmap` (the design's choice): the state unmapped (`in_axes=None`, one replicated array
per leaf), batches shaped (D_local, B_dev, ...) and mapped over the local devices.
`shard_map` (JAX's successor): `jax.jit(jax.shard_map(...))` over a 1-D mesh of all
devices; state is a replicated global array, the batch a global array (D · B_dev, ...)
sharded on its leading axis. Both run the same step functions, with the same axis name,
and on several processes (each passes only its local devices' data).
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
            return _pmap_replicated_state(fn, donate=True)
        mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P()))
        return jax.jit(mapped, donate_argnums=(0,))

    def map_train_steps(self, steps_fn: Callable) -> Callable:
        """(state, batches) -> (state, metrics) for `train_steps`: batches carry a leading
        steps axis N after the device axis, host (D_local, N, B_dev, ...)."""
        fn = functools.partial(steps_fn, axis_name=AXIS)
        if self.kind == "pmap":
            return _pmap_replicated_state(fn, donate=True)
        specs = (P(), P(None, AXIS))
        mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=specs, out_specs=(P(), P()))
        return jax.jit(mapped, donate_argnums=(0,))

    def map_eval_step(self, step_fn: Callable) -> Callable:
        """(params, batch) -> metrics."""
        fn = functools.partial(step_fn, axis_name=AXIS)
        if self.kind == "pmap":
            return _pmap_replicated_state(fn, donate=False)
        return jax.jit(jax.shard_map(fn, mesh=self.mesh, in_specs=(P(), P(AXIS)), out_specs=P()))

    # --- host <-> device ---------------------------------------------------------------
    def put_replicated(self, tree: Any) -> Any:
        """Host pytree -> one array per leaf, replicated on every device."""
        if self.kind == "pmap":
            # Through a pmap itself: the arrays then carry exactly the sharding of the
            # step's outputs, so the donated state never forces a retrace.
            lanes = np.zeros(jax.local_device_count(), np.int32)
            return _pmap_replicated_state(lambda x, _: x, donate=False)(tree, lanes)
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
    return jax.pmap(
        fn,
        axis_name=AXIS,
        in_axes=(None, 0),
        out_axes=None,
        donate_argnums=(0,) if donate else (),
    )
