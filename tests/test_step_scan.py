"""Several optimizer steps per call (lax.scan) equal single steps; the compiled step copies and
reduces only what it must."""

import functools
import re

import jax
import numpy as np
import pytest

from configs import model as model_configs
from transformer_jax.runtime import threefry
from transformer_jax.training import (
    DataParallel,
    create_train_state,
    make_optimizer,
    model_config_from,
    step_kwargs,
    train_step,
    train_steps,
    training_defaults,
)

V, S, T, B = 19, 6, 5, 4


def _batch(i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    src_len = rng.integers(2, S + 1, B).astype(np.int32)
    src = rng.integers(4, V, (B, S)).astype(np.int32)
    src[np.arange(S)[None] >= src_len[:, None]] = 0
    tgt_out = rng.integers(4, V, (B, T)).astype(np.int32)
    tgt_out[:, -1] = 0
    tgt_in = np.concatenate([np.ones((B, 1), np.int32), tgt_out[:, :-1]], axis=1)
    batch = dict(
        src=src,
        src_len=src_len,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        tgt_weight=(tgt_out != 0).astype(np.float32),
    )
    return {k: v[None] for k, v in batch.items()}  # (D=1, B, ...)


def _tiny_setup(**overrides):
    """(model config, optimizer, train_step keyword arguments) for the tiny model."""
    config = training_defaults()
    config.model = model_configs.get_config("tiny")
    config.update(overrides)
    model_config = model_config_from(config, V, V)
    tx, schedule = make_optimizer(config, model_config.model_dim)
    # The train loop's own binding: the run config's `gradients` rule ("tuned") included.
    return model_config, tx, step_kwargs(config, model_config, tx, schedule)


def _tiny_step(kind: str):
    """(DataParallel, mapped train step, device state) for the tiny model."""
    model_config, tx, kwargs = _tiny_setup()
    parallel = DataParallel.create(kind)
    step = parallel.map_train_step(functools.partial(train_step, **kwargs))
    return parallel, step, parallel.put_replicated(create_train_state(model_config, tx, seed=0))


@pytest.mark.parametrize("kind", ["pmap", "shard_map"])
def test_scanned_steps_equal_single_steps(kind):
    model_config, tx, kwargs = _tiny_setup(schedule="constant", learning_rate=0.01, clip_norm=1.0)
    parallel = DataParallel.create(kind)
    one = parallel.map_train_step(functools.partial(train_step, **kwargs))
    many = parallel.map_train_steps(functools.partial(train_steps, **kwargs))
    batches = [_batch(i) for i in range(4)]

    state = parallel.put_replicated(create_train_state(model_config, tx, seed=3))
    losses = []
    for b in batches:
        state, m = one(state, parallel.put_batch(b))
        losses.append(float(parallel.get_replicated(m)["loss"]))
    expected = parallel.get_replicated(state)

    state = parallel.put_replicated(create_train_state(model_config, tx, seed=3))
    state, m3 = many(state, parallel.put_batches(batches[:3]))  # steps 1-3 in one call
    state, _ = one(state, parallel.put_batch(batches[3]))  # step 4 alone
    got = parallel.get_replicated(state)
    scanned_losses = parallel.get_replicated(m3)["loss"]

    assert int(got.step) == int(expected.step) == 4
    np.testing.assert_allclose(scanned_losses, losses[:3], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(expected.params), strict=True):
        np.testing.assert_allclose(a, b, atol=2e-6, rtol=1e-5)


def _compiled_pmap_step() -> tuple[str, int]:
    """(compiled HLO text, number of state buffers) of the tiny model's one-device pmap step,
    compiled as a launcher's process does (`runtime.configure_process`: unrolled Threefry;
    JAX's rolled loop would copy its state every round)."""
    threefry.apply(training_defaults().threefry_lowering)
    parallel, step, state = _tiny_step("pmap")
    hlo = step.lower(state, parallel.put_batch(_batch(0))).compile().as_text()
    return hlo, len(jax.tree.leaves(state))


def test_one_device_step_all_reduces_no_gradients():
    """On one device the gradient mean is skipped: XLA:CPU would run its all-reduce as a
    copy of every gradient. Only the scalar metric and token-count sums remain."""
    hlo, _ = _compiled_pmap_step()
    # "%x = (f32[], f32[]) all-reduce(...)": the result types of every all-reduce.
    results = [
        line.split(" = ", 1)[1].split(" all-reduce(")[0]
        for line in hlo.splitlines()
        if " all-reduce(" in line
    ]
    assert results, "expected the metric sums' all-reduces in the compiled step"
    shapes = re.findall(r"\w+\[[^\]]*\]", " ".join(results))
    assert shapes and all(s.endswith("[]") for s in shapes), shapes


def test_pmap_step_does_not_copy_the_donated_state_at_entry():
    """The state enters pmap unmapped: no squeeze of a device axis, so XLA:CPU reuses the
    donated buffers instead of copying them (a stacked state: one copy per buffer)."""
    hlo, buffers = _compiled_pmap_step()
    copies = len(re.findall(r" copy\(", hlo[hlo.index("ENTRY") :]))
    assert copies < buffers // 4, (copies, buffers)


@pytest.mark.parametrize("kind", ["pmap", "shard_map"])
def test_mapped_step_donates_the_state(kind):
    """Every state buffer is donated and used: the old state is gone after the step, and
    JAX does not warn that a donated buffer could not be reused."""
    import warnings

    parallel, step, state = _tiny_step(kind)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new_state, _ = step(state, parallel.put_batch(_batch(0)))
        jax.block_until_ready(new_state)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(state))
    assert not [w for w in caught if "donated" in str(w.message)], [str(w.message) for w in caught]
