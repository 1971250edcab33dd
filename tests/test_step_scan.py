"""Several optimizer steps per call (lax.scan) equal single steps; the compiled step copies and
reduces only what it must."""

import re

import jax
import numpy as np
import pytest

from configs import model as model_configs
from tests.helpers import float32_matmuls
from transformer_jax.runtime import threefry
from transformer_jax.training import Built, DataParallel, build, training_defaults

# scanned against single steps at 2e-6: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

V, S, T, B = 19, 6, 5, 4


def _batch(i: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    src_len = rng.integers(2, S + 1, B).astype(np.int32)
    src = rng.integers(4, V, (B, S)).astype(np.int32)
    src[np.arange(S)[None] >= src_len[:, None]] = 0
    tgt_out = rng.integers(4, V, (B, T)).astype(np.int32)
    tgt_out[:, -1] = 0
    tgt_in = np.concatenate([np.ones((B, 1), np.int32), tgt_out[:, :-1]], axis=1)
    return dict(  # (B, ...): one process's rows, as the input pipeline yields them
        src=src,
        src_len=src_len,
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        tgt_weight=(tgt_out != 0).astype(np.float32),
    )


def _tiny(kind: str = "pmap", seed: int = 0, **overrides) -> Built:
    """The train loop's builder on the tiny model (the run config's `gradients` rule,
    "custom_vjp", included)."""
    config = training_defaults()
    config.model = model_configs.get_config("tiny")
    config.update(overrides, seed=seed)
    return build(config, src_vocab_size=V, tgt_vocab_size=V, parallel=DataParallel.create(kind))


def _tiny_step(kind: str):
    """(DataParallel, mapped train step, device state) for the tiny model."""
    built = _tiny(kind)
    return built.parallel, built.train_step, built.parallel.put_replicated(built.init_state())


@pytest.mark.parametrize("kind", ["pmap", "shard_map"])
def test_scanned_steps_equal_single_steps(kind):
    built = _tiny(kind, seed=3, schedule="constant", learning_rate=0.01, clip_norm=1.0)
    parallel, one, many = built.parallel, built.train_step, built.train_steps
    batches = [_batch(i) for i in range(4)]

    state = parallel.put_replicated(built.init_state())
    losses = []
    for b in batches:
        state, m = one(state, parallel.put_batch(b))
        losses.append(float(parallel.get_replicated(m)["loss"]))
    expected = parallel.get_replicated(state)

    state = parallel.put_replicated(built.init_state())
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
