"""Shared pieces of the speed benchmarks: settings, synthetic padded batches, FLOPs, peak."""

from __future__ import annotations

import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


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


SETTINGS = {
    "d2l": Setting("d2l", 2, 32, 4, 64, 10, 64, 200),
    "small": Setting("small", 3, 256, 4, 1024, 32, 64, 8000),
    "base": Setting("base", 6, 512, 8, 2048, 32, 32, 16000),
}


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


def matmul_peak(size: int = 2048, repeats: int = 10) -> float:
    """Float32 matmul FLOP/s of a large jitted jnp.dot on the default device (best of runs)."""
    a = jnp.ones((size, size), jnp.float32)
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
