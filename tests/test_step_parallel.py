"""pmap vs jit(shard_map) vs one device: the same parameters after N steps.

Runs in subprocesses: 4 fake CPU devices need XLA_FLAGS before jax is imported, and the rest
of the test session must keep the default single device.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from tests.helpers import REPO, subprocess_env

# Trains a tiny Transformer on synthetic batches shaped exactly like the data pipeline's,
# {src, src_len, tgt_in, tgt_out, tgt_weight} with leading axis D = local devices, and saves
# the final params of each run (name -> flattened params) to an npz file.
WORKER = textwrap.dedent(
    """
    import sys
    import jax, numpy as np, ml_collections
    from jax.flatten_util import ravel_pytree
    from configs import model as model_configs
    from transformer_jax.training import (DataParallel, create_train_state, make_optimizer,
        model_config_from, step_kwargs, train_step, training_defaults)
    import functools

    GLOBAL_BATCH, S, T, V, STEPS = 8, 7, 6, 23, 3

    def synthetic_batch(step, num_devices):
        rng = np.random.default_rng(step)
        src = rng.integers(4, V, (GLOBAL_BATCH, S)).astype(np.int32)
        src_len = rng.integers(2, S + 1, (GLOBAL_BATCH,)).astype(np.int32)
        src[np.arange(S)[None] >= src_len[:, None]] = 0
        tgt_len = rng.integers(1, T + 1, (GLOBAL_BATCH,))
        tgt_out = rng.integers(4, V, (GLOBAL_BATCH, T)).astype(np.int32)
        tgt_out[np.arange(T)[None] >= tgt_len[:, None]] = 0
        tgt_in = np.concatenate([np.ones((GLOBAL_BATCH, 1), np.int32), tgt_out[:, :-1]], 1)
        batch = dict(src=src, src_len=src_len, tgt_in=tgt_in, tgt_out=tgt_out,
                     tgt_weight=(tgt_out > 0).astype(np.float32))
        return {k: v.reshape((num_devices, -1) + v.shape[1:]) for k, v in batch.items()}

    def run(parallelism, grad_accum_steps=1, dropout=0.0):
        config = training_defaults()
        config.model = model_configs.get_config("tiny")
        config.model.dropout_rate = config.model.attention_dropout_rate = dropout
        # No Q/K/V/O biases: the key bias has a zero gradient (softmax ignores a per-query
        # constant), so its update is Adam's ratio of rounding noise, ±lr whatever the mapping.
        config.model.use_bias = False
        config.parallelism, config.grad_accum_steps = parallelism, grad_accum_steps
        config.warmup_steps, config.clip_norm, config.label_smoothing = 2, 1.0, 0.1
        model_config = model_config_from(config, V, V)
        tx, schedule = make_optimizer(config, model_config.model_dim)
        parallel = DataParallel.create(parallelism)
        step = parallel.map_train_step(functools.partial(  # the train loop's binding
            train_step, **step_kwargs(config, model_config, tx, schedule)))
        state = parallel.put_replicated(create_train_state(model_config, tx, seed=0))
        losses = []
        for i in range(STEPS):
            batch = synthetic_batch(i, jax.local_device_count())
            state, metrics = step(state, parallel.put_batch(batch))
            losses.append(float(parallel.get_replicated(metrics)["loss"]))
        host = parallel.get_replicated(state)
        assert int(host.step) == STEPS
        return ravel_pytree(host.params)[0], np.array(losses)

    out = {}
    for spec in sys.argv[2:]:
        name, parallelism, accum, dropout = spec.split(":")
        out[name], out[name + "/loss"] = run(parallelism, int(accum), float(dropout))
    np.savez(sys.argv[1], **out)
    """
)


def _run(tmp_path: Path, devices: int, runs: list[str]) -> dict[str, np.ndarray]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / f"params_{devices}.npz"
    env = subprocess_env(devices)
    result = subprocess.run(
        [sys.executable, str(script), str(out), *runs],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(np.load(out))


def test_pmap_shard_map_and_one_device_give_the_same_params(tmp_path):
    four = _run(
        tmp_path,
        4,
        [
            "pmap:pmap:1:0",
            "shard_map_accum:shard_map:2:0",  # also: micro-batches change nothing
            "pmap_dropout:pmap:1:0.3",
            "shard_map_dropout:shard_map:1:0.3",
        ],
    )
    one = _run(tmp_path, 1, ["single:shard_map:1:0"])
    reference = one["single"]
    assert one["single/loss"][-1] < one["single/loss"][0], "training did not move the params"
    # Summation order differs between one device and an all-reduce over four, and Adam
    # divides by sqrt(v): measured max |Δ| ~1.5e-5 on one weight of 6503 (relative 2.6e-5).
    for name in ("pmap", "shard_map_accum"):
        print(name, "max |param diff| vs one device:", np.abs(four[name] - reference).max())
        np.testing.assert_allclose(four[name], reference, atol=1e-5, rtol=1e-4, err_msg=name)
        np.testing.assert_allclose(
            four[name + "/loss"], one["single/loss"], rtol=1e-5, err_msg=name
        )
    # With dropout, devices draw masks from fold_in(key, step, device index): both mappings
    # use the same index, so they still agree exactly; dropout really changed the result.
    diff = np.abs(four["shard_map_dropout"] - four["pmap_dropout"]).max()
    print("max |param diff| pmap vs shard_map with dropout:", diff)
    np.testing.assert_allclose(
        four["shard_map_dropout"], four["pmap_dropout"], atol=1e-5, rtol=1e-4
    )
    assert np.abs(four["pmap_dropout"] - four["pmap"]).max() > 1e-4
