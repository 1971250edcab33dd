"""training.build: the same programs and the same parameters after N steps as the recipe
written out by hand (config -> model config -> optimizer -> step bindings -> mapped steps ->
state), on one device and on two fake ones (a subprocess: XLA_FLAGS before jax starts)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.helpers import run_npz_worker

# Trains the tiny model for STEPS steps twice per mapping, built by `build` and by hand, and
# saves the flattened initial and final params and the losses (+ one eval nll) of each run.
WORKER = textwrap.dedent(
    """
    import functools, sys
    import jax, numpy as np
    from jax.flatten_util import ravel_pytree
    from configs import model as model_configs
    from transformer_jax.nn import Transformer
    from transformer_jax.training import DataParallel, build, training_defaults
    from transformer_jax.training.optimizer import make_optimizer
    from transformer_jax.training.state import create_train_state, model_config_from
    from transformer_jax.training.step import eval_step, step_kwargs, train_step

    V, B, S, T, STEPS = 23, 8, 7, 6, 3

    def run_config(parallelism):
        c = training_defaults()
        c.model = model_configs.get_config("tiny")
        c.parallelism, c.seed = parallelism, 5
        # A schedule that depends on the run's length: total_steps must reach the optimizer
        # (num_train_steps says otherwise).
        c.schedule, c.learning_rate, c.warmup_steps, c.num_train_steps = "linear", 0.01, 1, 100
        return c

    def batch(i):  # (B_proc, ...), as the input pipeline yields them
        rng = np.random.default_rng(i)
        src_len = rng.integers(2, S + 1, B).astype(np.int32)
        src = np.where(np.arange(S) < src_len[:, None], rng.integers(4, V, (B, S)), 0)
        tgt_out = np.where(np.arange(T) < rng.integers(1, T + 1, B)[:, None],
                           rng.integers(4, V, (B, T)), 0)
        tgt_in = np.concatenate([np.ones((B, 1), np.int64), tgt_out[:, :-1]], 1)
        return dict(src=src.astype(np.int32), src_len=src_len, tgt_in=tgt_in.astype(np.int32),
                    tgt_out=tgt_out.astype(np.int32),
                    tgt_weight=(tgt_out > 0).astype(np.float32))

    def by_hand(c):  # the recipe as the train loop, five benchmarks and two tests wrote it
        model_config = model_config_from(c, V, V)
        tx, schedule = make_optimizer(c, model_config.model_dim, STEPS)
        parallel = DataParallel.create(c.parallelism)
        kwargs = step_kwargs(c, model_config, tx, schedule)
        step = parallel.map_train_step(functools.partial(train_step, **kwargs))
        evaluate = parallel.map_eval_step(functools.partial(
            eval_step, model=Transformer(model_config.replace(deterministic=True))))
        return parallel, step, evaluate, create_train_state(model_config, tx, c.seed)

    def built(c):
        b = build(c, src_vocab_size=V, tgt_vocab_size=V, total_steps=STEPS)
        return b.parallel, b.train_step, b.eval_step, b.init_state()

    def run(parallel, step, evaluate, state):
        out[f"{kind}/{name}/init"] = ravel_pytree(state.params)[0]
        state = parallel.put_replicated(state)
        metrics = []
        for i in range(STEPS):
            state, m = step(state, parallel.put_batch(batch(i)))
            metrics.append(float(parallel.get_replicated(m)["loss"]))
        sums = evaluate(state.params, parallel.put_batch(batch(STEPS)))
        metrics.append(float(parallel.get_replicated(sums)["nll"]))
        return ravel_pytree(parallel.get_replicated(state).params)[0], np.array(metrics)

    def check_batch_layout():
        # put_batch / put_batches alone split per-process rows: device d gets rows
        # d·B/2 .. (d+1)·B/2 of every batch, under both mappings.
        batches, half = [batch(i) for i in range(3)], B // 2
        p = DataParallel.create("pmap")
        one, many = p.put_batch(batches[0]), p.put_batches(batches)
        assert one["src"].shape == (2, half, S) and many["src"].shape == (2, 3, half, S)
        for d in range(2):
            rows = slice(d * half, (d + 1) * half)
            np.testing.assert_array_equal(one["src"][d], batches[0]["src"][rows])
            for n in range(3):
                np.testing.assert_array_equal(many["tgt_in"][d, n], batches[n]["tgt_in"][rows])
        p = DataParallel.create("shard_map")
        one, many = p.put_batch(batches[0]), p.put_batches(batches)
        assert one["src"].shape == (B, S) and many["src"].shape == (3, B, S)
        stacked = np.stack([b["tgt_in"] for b in batches])
        for shard in many["tgt_in"].addressable_shards:
            d = jax.devices().index(shard.device)
            assert shard.index[1] == slice(d * half, (d + 1) * half), shard.index
            np.testing.assert_array_equal(shard.data, stacked[:, d * half : (d + 1) * half])

    if jax.local_device_count() == 2:
        check_batch_layout()
    out = {}
    for kind in sys.argv[2:]:
        for name, make in (("hand", by_hand), ("built", built)):
            out[f"{kind}/{name}"], out[f"{kind}/{name}/metrics"] = run(*make(run_config(kind)))
    np.savez(sys.argv[1], **out)
    """
)


def _run(tmp_path: Path, devices: int, kinds: list[str]) -> dict[str, np.ndarray]:
    return run_npz_worker(WORKER, tmp_path, kinds, devices)


@pytest.mark.parametrize(("devices", "kinds"), [(1, ["pmap"]), (2, ["pmap", "shard_map"])])
def test_build_trains_exactly_as_the_recipe_by_hand(tmp_path, devices, kinds):
    runs = _run(tmp_path, devices, kinds)
    for kind in kinds:
        hand, got = runs[f"{kind}/hand"], runs[f"{kind}/built"]
        # The same program on the same data: bit for bit, params and every metric.
        np.testing.assert_array_equal(got, hand, err_msg=kind)
        np.testing.assert_array_equal(runs[f"{kind}/built/metrics"], runs[f"{kind}/hand/metrics"])
        moved = np.abs(got - runs[f"{kind}/built/init"]).max()
        assert moved > 1e-3, f"{kind}: training did not move the params ({moved})"
    if len(kinds) == 2:  # both mappings of one builder agree (summation order aside)
        np.testing.assert_allclose(runs["shard_map/built"], runs["pmap/built"], atol=1e-6)


def test_built_state_shapes_and_model_modes():
    from configs import model as model_configs
    from transformer_jax.training import build, training_defaults

    config = training_defaults()
    config.model = model_configs.get_config("tiny")
    config.num_train_steps = 10
    built = build(config, src_vocab_size=11, tgt_vocab_size=13)
    assert not built.model_config.deterministic and built.eval_model_config.deterministic
    assert built.eval_model_config.replace(deterministic=False) == built.model_config
    assert (built.model_config.src_vocab_size, built.model_config.tgt_vocab_size) == (11, 13)
    assert built.parallel.kind == config.parallelism
    abstract = built.abstract_state()
    state = built.init_state()
    shapes = lambda tree: jax.tree.map(lambda x: (x.shape, np.dtype(x.dtype)), tree)  # noqa: E731
    assert shapes(state) == shapes(abstract)
    assert int(state.step) == 0 and state.rng.shape == (2,)
