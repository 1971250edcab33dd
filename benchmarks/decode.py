r"""Decoding speed: cached greedy and beam search vs. full recomputation, tokens per second.

    python -m benchmarks.decode                      # "small" (3+3, D 256), 64 x 32 tokens
    python -m benchmarks.decode --variant=d2l --beam_sizes=1,4

The model is random with `<eos>` disabled, so every sentence decodes exactly
`--decode_len` tokens and the work is the same in every run. The whole search is one
compiled program; the time is the best of `--repeats` runs after compilation.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from transformer_jax import runtime
from transformer_jax.runtime import host_memory

FLAGS = flags.FLAGS
flags.DEFINE_string("variant", "small", "Model variant from configs/model.py.")
flags.DEFINE_integer("vocab_size", 8000, "Source and target vocabulary size.")
flags.DEFINE_integer("batch", 64, "Sentences per batch.")
flags.DEFINE_integer("src_len", 32, "Source tokens per sentence.")
flags.DEFINE_integer("decode_len", 32, "Generated tokens per sentence.")
flags.DEFINE_list("beam_sizes", ["1", "4"], "Beam sizes (1 = greedy).")
flags.DEFINE_bool("recompute", True, "Also time greedy decoding by full recomputation.")
flags.DEFINE_integer("repeats", 3, "Timed runs per setting (best is reported).")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype of the model.")
flags.DEFINE_enum(
    "host_memory",
    "system",
    list(host_memory.MODES),
    "As a run config's host_memory; 'system', as the translate CLI runs (greedy was faster).",
)


def random_params(cfg, seed: int = 0):
    """Host-filled random parameters (fast: no random ops to compile); `<eos>` never wins."""
    from transformer_jax.data.vocab import EOS_ID
    from transformer_jax.nn import Transformer

    x = jnp.zeros((1, 2), jnp.int32)
    shapes = jax.eval_shape(Transformer(cfg).init, jax.random.key(0), x, jnp.ones((1,)), x)
    rng = np.random.default_rng(seed)

    def fill(path, leaf):
        name = str(path[-1].key)
        if name == "scale":
            return np.ones(leaf.shape, leaf.dtype)
        if leaf.ndim == 1:
            return np.zeros(leaf.shape, leaf.dtype)
        fan_in = leaf.shape[-1] if name == "embedding" else leaf.shape[0]
        return (rng.normal(size=leaf.shape) / np.sqrt(fan_in)).astype(leaf.dtype)

    params = jax.tree_util.tree_map_with_path(fill, shapes["params"])
    params["output"]["dense"]["bias"][EOS_ID] = -1e9
    return params


def best_time(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from configs import model as model_configs
    from transformer_jax.decoding import beam_decode, greedy_decode
    from transformer_jax.nn import ModelConfig
    from transformer_jax.training.config import training_defaults

    process = training_defaults()  # the run config's process settings, from the flags
    process.host_memory = FLAGS.host_memory
    runtime.configure_process(process)  # before the first computation

    section = model_configs.get_config(FLAGS.variant).to_dict()
    cfg = ModelConfig.from_dict(
        section, src_vocab_size=FLAGS.vocab_size, tgt_vocab_size=FLAGS.vocab_size
    ).replace(deterministic=True, dtype=FLAGS.dtype)
    params = jax.device_put(random_params(cfg))
    rng = np.random.default_rng(1)
    src = jnp.asarray(rng.integers(4, FLAGS.vocab_size, (FLAGS.batch, FLAGS.src_len)), jnp.int32)
    src_len = jnp.full((FLAGS.batch,), FLAGS.src_len, jnp.int32)
    length = FLAGS.decode_len
    tokens = FLAGS.batch * length

    rows = []
    settings = [(int(b), True) for b in FLAGS.beam_sizes]
    if FLAGS.recompute:
        settings.append((1, False))
    for beam, cached in settings:
        if beam == 1:
            fn = lambda c=cached: greedy_decode(  # noqa: E731
                cfg, params, src, src_len, max_decode_len=length, use_cache=c
            )
        else:
            fn = lambda b=beam: (
                beam_decode(  # noqa: E731
                    cfg, params, src, src_len, beam_size=b, max_decode_len=length
                ).tokens
            )
        out = np.asarray(fn())
        if beam == 1:
            assert (out != 0).all(), "the benchmark expects full-length outputs"
        seconds = best_time(fn, FLAGS.repeats)
        name = ("greedy" if beam == 1 else f"beam {beam}") + ("" if cached else " (recompute)")
        rows.append((name, seconds, tokens / seconds))

    print(
        f"\n{FLAGS.variant}: {cfg.num_encoder_layers}+{cfg.num_decoder_layers} layers, "
        f"D {cfg.model_dim}, V {FLAGS.vocab_size}; {FLAGS.batch} sentences x {FLAGS.src_len} "
        f"source tokens -> {length} tokens; {cfg.dtype}; "
        f"{jax.devices()[0].platform} x{jax.device_count()}"
    )
    print("| search | seconds | output tokens/s |\n|---|---|---|")
    for name, seconds, rate in rows:
        print(f"| {name} | {seconds:.3f} | {rate:,.0f} |")


if __name__ == "__main__":
    app.run(main)
