r"""Train-step speed for a config: steps/s and target tokens/s on synthetic full-length batches.

    python -m benchmarks.config_step --config=configs/fra_eng.py --steps=20
    python -m benchmarks.config_step --config=configs/fra_eng.py --config.model.model_dim=64

Prints one table row: parameters, the per-step shapes, compile time, steps/s and tokens/s.
Batches are padded to the maximum lengths (the worst case for bucketing). The step is the
one a run of this config trains with (`training.build`).
"""

from __future__ import annotations

import time

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from transformer_jax import launch
from transformer_jax.runtime import configure_process
from transformer_jax.training import build

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Run config, e.g. configs/fra_eng.py.")
flags.DEFINE_integer("steps", 20, "Timed steps (after one compile step).")
flags.DEFINE_integer("vocab_size", 0, "Vocabulary size (0 = data.vocab_size).")


def synthetic_batch(rng, batch: int, s: int, t: int, vocab: int) -> dict[str, np.ndarray]:
    """A full-length batch of one process: src (B, S), src_len (B,), tgt_* (B, T)."""
    src = rng.integers(4, vocab, (batch, s)).astype(np.int32)
    tgt = rng.integers(4, vocab, (batch, t)).astype(np.int32)
    return dict(
        src=src,
        src_len=np.full((batch,), s, np.int32),
        tgt_in=tgt,
        tgt_out=np.roll(tgt, -1, axis=1),
        tgt_weight=np.ones((batch, t), np.float32),
    )


def main(argv):
    del argv
    config = FLAGS.config
    configure_process(config)  # before the first computation: XLA flags, host memory
    vocab = FLAGS.vocab_size or config.data.vocab_size
    built = build(config, src_vocab_size=vocab, tgt_vocab_size=vocab)
    step, parallel = built.train_step, built.parallel
    host_state = built.init_state()
    params = sum(x.size for x in jax.tree.leaves(host_state.params))
    state = parallel.put_replicated(host_state)
    b, s, t = config.data.batch_size, config.data.max_src_len, config.data.max_tgt_len
    batch = parallel.put_batch(synthetic_batch(np.random.default_rng(0), b, s, t, vocab))
    start = time.perf_counter()
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
        state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    elapsed = time.perf_counter() - start
    print("| params | B x S x T | V | compile s | steps/s | target tok/s |")
    print(
        f"| {params:,} | {b}x{s}x{t} | {vocab} | {compile_s:.1f} | "
        f"{FLAGS.steps / elapsed:.2f} | {FLAGS.steps * b * t / elapsed:,.0f} |"
    )


if __name__ == "__main__":
    app.run(main, flags_parser=launch.flags_parser(required=("config",)))
