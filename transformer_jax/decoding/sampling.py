"""Sampling: each token drawn from the model's distribution, reshaped by a temperature and
cut by top-k and top-p (nucleus) filters (Holtzman et al. 2020), as pure functions.

    tokens, log_probs = sample_search(step_fn, state, B, L, seed=0, row_ids=jnp.arange(B),
                                      temperature=0.8, top_k=0, top_p=0.9)

Every setting is traced (one compiled program serves every temperature, k, p and seed).
Randomness is per row and step: a row's id is one or more whole numbers (row_ids (N,) or
(N, K), e.g. the sentence's own index, its part and its sample), each folded into
`key(seed)` in turn, and then the step: row r's key at step i is
`fold_in(fold_in(fold_in(key(seed), row_ids[r, 0]), row_ids[r, 1]), ..., i)`. A row's draws
depend on the seed and its id only, not on the batch it was decoded in, its neighbours, nor
on how many devices shared the batch.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID
from transformer_jax.decoding.search import NEG_INF, GrowFn, StepFn, extend_rows

Array = jnp.ndarray


def apply_temperature(logits: Array, temperature: Array | float) -> Array:
    """logits / T: (N, V) -> (N, V) float32; T < 1 sharpens, T > 1 flattens."""
    return logits.astype(jnp.float32) / temperature


def top_k_filter(logits: Array, k: Array | int) -> Array:
    """Keep each row's k largest logits (ties with the k-th kept too), -inf elsewhere;
    k <= 0 keeps all: (N, V) -> (N, V)."""
    vocab = logits.shape[-1]
    k = jnp.asarray(k, jnp.int32)
    ranked = jnp.sort(logits, axis=-1)[:, ::-1]  # (N, V) descending
    kth = jax.lax.dynamic_index_in_dim(ranked, jnp.clip(k, 1, vocab) - 1, 1)  # (N, 1)
    return jnp.where((k > 0) & (logits < kth), NEG_INF, logits)


def top_p_filter(logits: Array, p: Array | float) -> Array:
    """Keep the smallest set of most probable tokens whose probability reaches p (the
    nucleus), -inf elsewhere: a token is kept while the mass of those ranked before it is
    < p, so the most probable always is; ties with the last kept are kept. p >= 1 keeps
    all: (N, V) -> (N, V)."""
    ranked = jnp.sort(logits, axis=-1)[:, ::-1]  # (N, V) descending
    probs = jax.nn.softmax(ranked.astype(jnp.float32), axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # (N, V) mass ranked before each token
    kept = jnp.sum(before < p, axis=-1, keepdims=True)  # (N, 1), >= 1 for p > 0
    last = jnp.take_along_axis(ranked, kept - 1, axis=-1)  # (N, 1) smallest kept logit
    return jnp.where((p < 1) & (logits < last), NEG_INF, logits)


def filter_logits(
    logits: Array, temperature: Array | float, top_k: Array | int, top_p: Array | float
) -> Array:
    """The logits sampling draws from: temperature, then top-k, then top-p (as Hugging
    Face's and CTranslate2's samplers order them): (N, V) -> (N, V) float32."""
    return top_p_filter(top_k_filter(apply_temperature(logits, temperature), top_k), top_p)


def row_keys(seed: Array | int, row_ids: Array, step: Array | int) -> Array:
    """(N,) keys of step `step` for rows `row_ids` (N,) or (N, K) (module docstring)."""
    base = jax.random.key(jnp.asarray(seed, jnp.uint32))
    ids = jnp.reshape(row_ids, (row_ids.shape[0], -1))  # (N, K)

    def fold(row: Array) -> Array:  # (K,) -> one key
        key = base
        for k in range(ids.shape[1]):
            key = jax.random.fold_in(key, row[k])
        return jax.random.fold_in(key, step)

    return jax.vmap(fold)(ids)


def sample_tokens(
    logits: Array,
    keys: Array,
    temperature: Array | float,
    top_k: Array | int,
    top_p: Array | float,
) -> Array:
    """One token per row drawn from the filtered distribution: (N, V), (N,) keys -> (N,)."""
    filtered = filter_logits(logits, temperature, top_k, top_p)
    return jax.vmap(jax.random.categorical)(keys, filtered).astype(jnp.int32)


def sample_search(
    step_fn: StepFn,
    state: Any,
    batch_size: int,
    max_len: int,
    *,
    seed: Array | int,
    row_ids: Array,
    temperature: Array | float,
    top_k: Array | int = 0,
    top_p: Array | float = 1.0,
    grow: GrowFn | None = None,
    limit: Array | int | None = None,
    prefix: Array | None = None,
    min_len: int = 1,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> tuple[Array, Array]:
    """Ancestral sampling: feed `<bos>`, then a token drawn each step, until `<eos>`.

    Args as `search.greedy_search`'s, and seed, row_ids (B,) or (B, K) int32 (module docstring),
    temperature > 0, top_k (0 = all), top_p (1 = all). Returns (tokens (B, L), log P (B,)
    of each row under the model's own distribution, not the filtered one).
    """

    def pick(logits: Array, i: Array) -> Array:
        return sample_tokens(logits, row_keys(seed, row_ids, i), temperature, top_k, top_p)

    return extend_rows(
        step_fn,
        state,
        batch_size,
        max_len,
        pick,
        grow=grow,
        limit=limit,
        prefix=prefix,
        min_len=min_len,
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
    )
