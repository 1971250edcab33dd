"""A mapped step's programs go when the step does: runs in one process do not pile up.

JAX 0.10's pmap keeps every pmapped function, with its traced and compiled programs,
forever (`training.parallel._release_with` has the why); `DataParallel` releases them when
its mapped step is collected. Before, each tiny training run in one process kept ~50 MB.
"""

from __future__ import annotations

import gc
import weakref

import jax
import numpy as np
import pytest

from tests.tiny_run import tiny_config
from transformer_jax.training import DataParallel, train_and_evaluate


def _live(type_name: str) -> int:
    """How many objects of a type (by name: JAX's internals are not public) are alive."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o).__name__ == type_name)


@pytest.mark.parametrize("kind", ["pmap", "shard_map"])
@pytest.mark.parametrize("mapping", ["map_train_step", "map_eval_step"])
def test_a_dropped_mapped_step_frees_its_function(kind, mapping):
    parallel = DataParallel.create(kind)
    scale = np.float32(3.0)

    def step(state, batch, axis_name):  # a fresh function object, as each run builds
        return state * scale, jax.lax.psum(batch.sum(), axis_name)

    mapped = getattr(parallel, mapping)(step)
    state = parallel.put_replicated(np.ones(2, np.float32))
    new_state, _ = mapped(state, parallel.put_batch({"x": np.ones((2, 3), np.float32)})["x"])
    np.testing.assert_allclose(parallel.get_replicated(new_state), [3.0, 3.0])

    alive = weakref.ref(step)
    del mapped, step, new_state
    gc.collect()
    assert alive() is None, f"{kind}'s {mapping} kept the step function (and its programs)"


def test_put_replicated_builds_its_program_once():
    parallel = DataParallel.create("pmap")
    first = parallel.put_replicated({"w": np.ones(3, np.float32)})
    traced = _live("JaxprEqn")
    for _ in range(3):
        again = parallel.put_replicated({"w": np.full(3, 2.0, np.float32)})
    np.testing.assert_array_equal(parallel.get_replicated(again)["w"], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(parallel.get_replicated(first)["w"], [1.0, 1.0, 1.0])
    assert _live("JaxprEqn") == traced  # nothing traced again, nothing kept


def test_training_runs_in_one_process_keep_no_programs_of_the_last(tmp_path):
    """The third run leaves exactly as many traced equations alive as the second."""
    after = []
    for seed in range(3):
        train_and_evaluate(tiny_config(2, seed=seed), tmp_path / str(seed))
        after.append(_live("JaxprEqn"))
    assert after[2] == after[1], f"traced equations alive after each run: {after}"
