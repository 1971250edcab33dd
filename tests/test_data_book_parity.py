"""The d2l variant trains on what the book trains on: 601 pairs, 10 batches an epoch (the last
one partial), 2,000 steps; and a partial batch's dummy rows change neither loss nor gradients."""

import functools

import jax
import numpy as np
import optax
import pytest

from configs import fra_eng
from configs import model as model_configs
from tests.helpers import float32_matmuls
from transformer_jax.data import batching, encoding, pipeline
from transformer_jax.data.vocab import EOS_ID
from transformer_jax.nn import Transformer
from transformer_jax.training import (
    DataParallel,
    create_train_state,
    model_config_from,
    train_step,
    training_defaults,
)
from transformer_jax.training import config as config_lib

# a padded batch against its real rows at 1e-6: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

pytest_plugins = ["tests.conftest_data"]


@pytest.mark.slow  # trains for real
def test_d2l_variant_trains_on_the_books_601_pairs_for_2000_steps(real_cfg):
    c = fra_eng.get_config("d2l")
    c.data.update(zip_path=real_cfg.zip_path, url="", data_dir=real_cfg.data_dir)
    pipe = pipeline.create_input_pipeline(c.data)
    it = pipe.train_iter
    assert pipe.split_sizes["selected_train"] == 601
    assert it.batches_per_epoch == 10  # ceil(601 / 64), as the book's DataLoader
    assert config_lib.resolve_num_train_steps(c, it.batches_per_epoch) == 2000
    # Epoch 1's batches, as a run sees them after epoch 0: each of the 601 pairs once.
    real_rows, rows = [], []
    for batch in it.epoch_batches(1):
        real = batch["tgt_weight"].sum(-1) > 0
        real_rows.append(int(real.sum()))
        rows.extend(np.concatenate([batch["src"], batch["tgt_out"]], 1)[real].tolist())
    assert real_rows == [64] * 9 + [25]
    enc = it._encoded  # the packed training pairs, in file order
    assert sorted(rows) == sorted(np.concatenate([enc.src, enc.tgt], 1).tolist())


# -- a step on a partial batch ----------------------------------------------------------------

V, N, GLOBAL_BATCH, SEED = 19, 11, 8, 4  # 11 examples: one full batch, then 3 real + 5 dummies


def _encoded() -> encoding.EncodedPairs:
    rng = np.random.default_rng(0)

    def side(width):
        lengths = rng.integers(2, width + 1, N).astype(np.int32)
        ids = rng.integers(4, V, (N, width)).astype(np.int32)
        ids[np.arange(width)[None] >= lengths[:, None]] = 0
        ids[np.arange(N), lengths - 1] = EOS_ID
        return ids, lengths

    (src, src_len), (tgt, tgt_len) = side(6), side(5)
    return encoding.EncodedPairs(src, src_len, tgt, tgt_len)


def _sgd_step(grad_accum_steps: int):
    """(mapped train_step, initial state) of the tiny model without dropout, under plain SGD
    with learning rate 1, so new params = params - gradients."""
    config = training_defaults()
    config.model = model_configs.get_config("tiny")
    config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
    model_config = model_config_from(config, V, V)
    tx = optax.sgd(1.0)
    step = functools.partial(
        train_step,
        model=Transformer(model_config),
        tx=tx,
        schedule=optax.constant_schedule(1.0),
        label_smoothing=0.0,  # the d2l config's plain masked CE
        grad_accum_steps=grad_accum_steps,
    )
    parallel = DataParallel.create("pmap")
    state = create_train_state(model_config, tx, seed=0)
    return parallel, parallel.map_train_step(step), state


def _run(parallel, step, state, batch):
    new_state, metrics = step(parallel.put_replicated(state), parallel.put_batch(batch))
    new_params = parallel.get_replicated(new_state).params
    grads = jax.tree.map(lambda old, new: np.asarray(old - new), state.params, new_params)
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in metrics.items()}, grads


@pytest.mark.parametrize("grad_accum_steps", [1, 2])  # 2: one micro-batch is all dummies
def test_dummy_rows_change_neither_loss_nor_gradients(grad_accum_steps):
    enc = _encoded()
    it = batching.TrainIterator(enc, global_batch=GLOBAL_BATCH, seed=SEED, drop_remainder=False)
    next(it)
    padded = next(it)  # the epoch's last batch: 3 real rows, 5 dummies
    real = padded["tgt_weight"].sum(-1) > 0
    assert real.tolist() == [True] * 3 + [False] * 5
    order = np.random.default_rng([SEED, 0]).permutation(N)
    only_real = encoding.make_batch(enc, order[GLOBAL_BATCH:], 6, 5)
    for key in encoding.BATCH_KEYS:
        np.testing.assert_array_equal(padded[key][real], only_real[key])

    want, want_grads = _run(*_sgd_step(1), only_real)
    got, got_grads = _run(*_sgd_step(grad_accum_steps), padded)
    assert got["weight"] == want["weight"] == enc.tgt_len[order[GLOBAL_BATCH:]].sum()
    # The objective: Σ w·CE / Σ w over real tokens only (the dummies add 0 to both sums).
    np.testing.assert_allclose(got["loss"] / got["weight"], want["loss"] / want["weight"], 1e-6)
    np.testing.assert_allclose(got["grad_norm"], want["grad_norm"], rtol=1e-5)
    jax.tree.map(
        lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-7), got_grads, want_grads
    )

    # The check can fail: dummies that counted (weight 1 on their <pad> targets) would move it.
    counted = {k: v.copy() for k, v in padded.items()}
    counted["tgt_weight"][~real] = 1.0
    wrong, _ = _run(*_sgd_step(grad_accum_steps), counted)
    assert abs(wrong["loss"] / wrong["weight"] - want["loss"] / want["weight"]) > 1e-3
