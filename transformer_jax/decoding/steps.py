"""Step functions over a `Transformer`: with the key/value cache, or by full recomputation.

Both have the signature of `search.StepFn`, so the same greedy and beam search run on either.
The cached step is the fast one; the recomputing step runs the whole decoder over the prefix
at every step (O(T²) work) and is the reference the cache is tested against.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import traverse_util

from transformer_jax.nn import ModelConfig, Transformer

Array = jnp.ndarray


def check_decode_len(config: ModelConfig, max_decode_len: int) -> None:
    """Raise if L generated tokens would need positions beyond a learned position table."""
    if not isinstance(max_decode_len, int) or max_decode_len < 1:
        raise ValueError(f"max_decode_len must be an integer >= 1, got {max_decode_len!r}.")
    limit = config.position_limit
    if limit is not None and max_decode_len > limit:
        raise ValueError(
            f"max_decode_len={max_decode_len} exceeds the learned position table "
            f"(model.max_len={limit}): the decoder has no positions beyond it. Lower "
            "max_decode_len."
        )


def encode(config: ModelConfig, params: Any, src: Array, src_len: Array) -> Array:
    """src (B, S), src_len (B,) -> memory (B, S, D) with the deterministic encoder."""
    model = Transformer(config.replace(deterministic=True, decode=False))
    return model.apply({"params": params}, src, src_len, method="encode")


def init_cache(
    config: ModelConfig,
    memory: Array,
    src_len: Array,
    max_decode_len: int,
    rows: int | None = None,
) -> Any:
    """A zero cache for `rows` decoded rows (default `memory.shape[0]`), L = max_decode_len.

    Self-attention leaves get `rows` rows; the memory leaves keep memory's B rows, which
    beam search's B·W = `rows` hypotheses share (W per sentence, consecutive rows).
    Shapes come from `jax.eval_shape` of the decode-mode `init`, so no parameters are
    created or computed; the cache starts at zeros with both indices at 0.
    """
    batch = memory.shape[0] if rows is None else rows
    model = Transformer(config.replace(deterministic=True, decode=True))
    tgt = jnp.zeros((batch, max_decode_len), jnp.int32)  # (N, L) sizes the cache
    src = jnp.zeros(memory.shape[:2], jnp.int32)  # (B, S)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), src, src_len, tgt))["cache"]
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


# Cross-attention cache leaves: the projected encoder memory, fixed while a batch decodes.
MEMORY_LEAVES = ("memory_key", "memory_value", "memory_ready")
# Self-attention cache leaves, (N, H, L, K): past keys/values along axis 2.
POSITION_LEAVES = ("cached_key", "cached_value")


def grow_cache(cache: Any, length: int) -> Any:
    """Give every self-attention key/value leaf room for `length` positions (axis 2).

    The new slots are zeros after the written ones: attention masks every slot at or beyond
    the cache index, so they are never read. A `search.GrowFn` for segmented decoding.
    """
    flat = traverse_util.flatten_dict(cache)
    for path, leaf in flat.items():
        if path[-1] in POSITION_LEAVES:
            room = leaf.shape[2]
            if length < room:
                raise ValueError(f"Cannot shrink a cache of {room} positions to {length}.")
            flat[path] = jnp.pad(leaf, ((0, 0), (0, 0), (0, length - room), (0, 0)))
    return traverse_util.unflatten_dict(flat)


def split_cache(cache: Any) -> tuple[Any, Any]:
    """cache -> (per-step part: self-attention keys/values and indices, memory part)."""
    flat = traverse_util.flatten_dict(cache)
    step = {k: v for k, v in flat.items() if k[-1] not in MEMORY_LEAVES}
    memory = {k: v for k, v in flat.items() if k[-1] in MEMORY_LEAVES}
    return traverse_util.unflatten_dict(step), traverse_util.unflatten_dict(memory)


def merge_cache(step_part: Any, memory_part: Any) -> Any:
    """Inverse of `split_cache`."""
    flat = {**traverse_util.flatten_dict(step_part), **traverse_util.flatten_dict(memory_part)}
    return traverse_util.unflatten_dict(flat)


def project_memory(
    config: ModelConfig, params: Any, memory: Array, src_len: Array, cache: Any
) -> Any:
    """The memory part of the cache: every cross-attention's keys/values of `memory`.

    Computed once, before the search loop, so the loop carries (and beam search reorders)
    only the self-attention cache; the memory part is a constant of the loop.
    """
    model = Transformer(config.replace(deterministic=True, decode=True))
    # One step of the decoder on the cache's rows (B·W in beam search; any token: only the
    # memory part is kept).
    rows = max(leaf.shape[0] for leaf in jax.tree.leaves(split_cache(cache)[0]) if leaf.ndim)
    bos = jnp.ones((rows, 1), jnp.int32)
    _, mutated = model.apply(
        {"params": params, "cache": cache},
        memory,
        src_len,
        bos,
        method="decode",
        mutable=["cache"],
    )
    return split_cache(mutated["cache"])[1]


def cached_step(
    config: ModelConfig, params: Any, memory: Array, src_len: Array, memory_cache: Any = None
):
    """Step function feeding one token per row through the decode-mode decoder.

    State: the `cache` collection (per layer `cached_key`/`cached_value` (N, H, L, K) and a
    scalar `cache_index`; a scalar `position_index`). memory (N, S, D), src_len (N,).
    With `memory_cache` (from `project_memory`) the state is only the per-step part of the
    cache (`split_cache(...)[0]`), and the projected memory is closed over as a constant.
    """
    model = Transformer(config.replace(deterministic=True, decode=True))

    def step(tokens: Array, cache: Any) -> tuple[Array, Any]:
        full = cache if memory_cache is None else merge_cache(cache, memory_cache)
        logits, mutated = model.apply(
            {"params": params, "cache": full},
            memory,
            src_len,
            tokens[:, None],  # (N, 1)
            method="decode",
            mutable=["cache"],
        )  # (N, 1, V)
        new = mutated["cache"]
        if memory_cache is not None:
            new = split_cache(new)[0]
        return logits[:, 0], new

    return step


def recompute_step(config: ModelConfig, params: Any, memory: Array, src_len: Array):
    """Step function that reruns the full (causal) decoder over the whole prefix.

    State: (prefix (N, L) int32, index () int32). Position i's logits depend only on
    prefix[:, :i + 1] (causal mask), so the unwritten tail of the buffer does not matter.
    """
    model = Transformer(config.replace(deterministic=True, decode=False))

    def step(tokens: Array, state: tuple[Array, Array]) -> tuple[Array, Any]:
        prefix, i = state
        prefix = jax.lax.dynamic_update_slice(prefix, tokens[:, None], (0, i))  # (N, L)
        logits = model.apply({"params": params}, memory, src_len, prefix, method="decode")
        return jax.lax.dynamic_index_in_dim(logits, i, axis=1, keepdims=False), (prefix, i + 1)

    return step


def recompute_state(batch: int, max_decode_len: int) -> tuple[Array, Array]:
    """Initial state of `recompute_step`: an all-<pad> prefix buffer and index 0."""
    return jnp.zeros((batch, max_decode_len), jnp.int32), jnp.array(0, jnp.int32)
