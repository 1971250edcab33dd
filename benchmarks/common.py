"""Shared pieces of the speed benchmarks: a config's sizes, synthetic padded batches, FLOPs,
peak, and the `--config` flag every speed benchmark reads (`configs/benchmark.py`)."""

from __future__ import annotations

import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from transformer_jax import launch
from transformer_jax.runtime import configure_process
from transformer_jax.training import Built, build
from transformer_jax.training.config import validate_config


@dataclasses.dataclass(frozen=True)
class Setting:
    """One benchmark size: model shape, sequence length L (source = target), batch, vocab."""

    name: str
    layers: int  # encoder layers = decoder layers
    model_dim: int
    num_heads: int
    ffn_dim: int
    length: int
    batch: int
    vocab: int


def define_config_flag() -> None:
    """`--config=configs/benchmark.py:<size>` with `--config.key=value` overrides."""
    config_flags.DEFINE_config_file(
        "config", None, "Benchmark run config, e.g. configs/benchmark.py:small."
    )


def run(main) -> None:
    """`app.run(main)` with the launchers' flag checks: a mistake is one FATAL line."""
    app.run(main, flags_parser=launch.flags_parser(required=("config",), module=main.__module__))


def config_from_flags() -> tuple[ml_collections.ConfigDict, Setting]:
    """The `--config` run config, applied to the process (`runtime.configure_process`: call it
    before anything computes) and validated, and its `Setting`."""
    config = flags.FLAGS.config
    try:
        configure_process(config)
        validate_config(config, num_devices=jax.local_device_count(), process_count=1)
    except ValueError as error:  # ConfigError, or a bad process setting
        launch.fatal(f"invalid config: {error}")
    flag = flags.FLAGS["config"]
    name = flag.serialize().partition(":")[2] or flag.config_filename  # "small" of path:small
    return config, setting(config, name)


def setting(config: ml_collections.ConfigDict, name: str) -> Setting:
    """The sizes of a benchmark run config: L = data.max_src_len, B = data.batch_size rows,
    V = data.vocab_size (`configs/benchmark.py`)."""
    m, d = config.model, config.data
    if m.num_encoder_layers != m.num_decoder_layers or d.max_src_len != d.max_tgt_len:
        raise ValueError(
            "a benchmark setting has as many encoder as decoder layers and one length L "
            f"(data.max_src_len = data.max_tgt_len); got {m.num_encoder_layers}+"
            f"{m.num_decoder_layers} layers, lengths {d.max_src_len}/{d.max_tgt_len}."
        )
    return Setting(
        name, m.num_encoder_layers, m.model_dim, m.num_heads, m.ffn_dim, d.max_src_len,
        d.batch_size, d.vocab_size,
    )  # fmt: skip


def build_setting(config: ml_collections.ConfigDict, s: Setting) -> Built:
    """The project's builder on the setting's synthetic vocabulary (V per side)."""
    return build(config, src_vocab_size=s.vocab, tgt_vocab_size=s.vocab)


def padded_batch(s: Setting, seed: int) -> dict[str, np.ndarray]:
    """Token batch with realistic padding: source and target lengths uniform in [L/2, L].

    Returns src (B, L), src_len (B,), tgt_in / tgt_out (B, L), tgt_weight (B, L); ids 0..3
    are PAD, BOS, EOS, UNK as in transformer_jax.data.
    """
    rng = np.random.default_rng(seed)
    b, length = s.batch, s.length
    src_len = rng.integers(length // 2, length + 1, size=b)
    tgt_len = rng.integers(length // 2, length + 1, size=b)
    pos = np.arange(length)[None]
    src = np.where(pos < src_len[:, None], rng.integers(4, s.vocab, size=(b, length)), 0)
    tgt_out = np.where(pos < tgt_len[:, None], rng.integers(4, s.vocab, size=(b, length)), 0)
    tgt_in = np.concatenate([np.ones((b, 1), np.int64), tgt_out[:, :-1]], axis=1)
    tgt_in = np.where(pos < tgt_len[:, None], tgt_in, 0)
    return {
        "src": src.astype(np.int32),
        "src_len": src_len.astype(np.int32),
        "tgt_in": tgt_in.astype(np.int32),
        "tgt_out": tgt_out.astype(np.int32),
        "tgt_weight": (tgt_out != 0).astype(np.float32),
    }


def non_pad_tokens(batch: dict[str, np.ndarray]) -> int:
    """Non-pad source + target tokens of a batch (the throughput unit of the tables)."""
    return int(batch["src_len"].sum() + batch["tgt_weight"].sum())


def train_flops(s: Setting) -> float:
    """Model FLOPs of one training step, counting every (padded) position.

    Forward matmul FLOPs, 2 per multiply-add, with S = T = L, D, F, V and B as in Setting:
      encoder layer:  B·S·(2·4D² + 2·2DF)            projections Q,K,V,O and the FFN
                      + B·2·2·S²·D                    QKᵀ and AV
      decoder layer:  B·T·(2·4D² + 2·2DF)            self-attention projections and FFN
                      + B·2·2·T²·D                    self-attention QKᵀ and AV
                      + B·T·2·2D² + B·S·2·2D²         cross-attention Q,O (target) K,V (source)
                      + B·2·2·T·S·D                   cross-attention QKᵀ and AV
      output:         B·T·2·D·V
    Training = 3 × forward (the backward pass costs two forwards); the softmax, norms and
    the optimizer update are not counted (the usual MFU convention).
    """
    b, l, d, f, v, n = s.batch, s.length, s.model_dim, s.ffn_dim, s.vocab, s.layers
    enc = b * l * (8 * d * d + 4 * d * f) + 4 * b * l * l * d
    dec = b * l * (8 * d * d + 4 * d * f) + 4 * b * l * l * d
    dec += b * l * 4 * d * d + b * l * 4 * d * d + 4 * b * l * l * d
    out = 2 * b * l * d * v
    return 3.0 * (n * (enc + dec) + out)


def matmul_peak(size: int = 2048, repeats: int = 10, dtype=jnp.float32) -> float:
    """Matmul FLOP/s of a large jitted jnp.dot on the default device (best of runs), in
    `dtype` (float32 here; `benchmarks.accelerator_check` takes the bfloat16 peak of a GPU)."""
    a = jnp.ones((size, size), dtype)
    dot = jax.jit(jnp.dot)
    dot(a, a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dot(a, a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def summary(tokens_per_call: float, times: list[float]) -> dict[str, float]:
    rates = [tokens_per_call / t for t in times]
    return {
        "median": statistics.median(rates),
        "min": min(rates),
        "max": max(rates),
        "step_s": statistics.median(times),
    }
