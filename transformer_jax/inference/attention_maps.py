"""Attention weights of one sentence pair, for the heatmaps of `evaluation.plots.plot_attention`
(d2l §11.7.6).

maps = attention_weights(model_config, params, src_ids, tgt_ids)   # AttentionMaps
maps = Translator.from_workdir(workdir).attention_maps("go .")     # the same, from text
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.data.vocab import BOS_ID
from transformer_jax.decoding.shapes import LENGTH_BUCKET, SourceTooLongError, round_up
from transformer_jax.nn import ModelConfig, Transformer


@dataclasses.dataclass
class AttentionMaps:
    """Attention weights of one sentence pair, trimmed to the real tokens (no padding).

    encoder_self: (L_enc, H, S, S); decoder_self: (L_dec, H, T, T);
    cross: (L_dec, H, T, S). Rows are queries, columns keys. T counts the decoder inputs
    `<bos>` + target tokens.
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    encoder_self: np.ndarray
    decoder_self: np.ndarray
    cross: np.ndarray


def attention_weights(
    model_config: ModelConfig,
    params: Any,
    src_ids: Sequence[int],
    tgt_ids: Sequence[int],
    *,
    src_tokens: Sequence[str] | None = None,
    tgt_tokens: Sequence[str] | None = None,
) -> AttentionMaps:
    """Teacher-forced attention weights of one pair, for heatmaps (d2l §11.7.6).

    src_ids: the source ids with `<eos>`; tgt_ids: the target (e.g. the predicted translation)
    without `<bos>`; the decoder reads `<bos>` + tgt_ids, which reproduces the weights seen
    while decoding. Both are padded to a bucket width for the model and trimmed afterwards.
    """
    cfg = model_config.replace(deterministic=True, decode=False)
    s, t = len(src_ids), len(tgt_ids) + 1
    if s == 0:
        raise ValueError("attention_weights needs a non-empty source.")
    limit = cfg.position_limit
    if limit is not None and max(s, t) > limit:
        raise SourceTooLongError(
            f"pair of lengths ({s}, {t}) exceeds the learned position table "
            f"(model.max_len={limit})."
        )
    width_s, width_t = round_up(s, LENGTH_BUCKET), round_up(t, LENGTH_BUCKET)
    if limit is not None:
        width_s, width_t = min(width_s, limit), min(width_t, limit)
    src = np.zeros((1, width_s), np.int32)
    src[0, :s] = src_ids
    tgt_in = np.zeros((1, width_t), np.int32)
    tgt_in[0, :t] = [BOS_ID, *tgt_ids]
    tree = _sown_attention(cfg, params, src, np.array([s], np.int32), tgt_in)
    encoder = tree.get("encoder", {})
    decoder = tree.get("decoder", {})
    enc_self = _stack(encoder, "self_attention")[:, :, :s, :s]
    dec_self = _stack(decoder, "self_attention")[:, :, :t, :t]
    cross = _stack(decoder, "cross_attention")[:, :, :t, :s]
    return AttentionMaps(
        src_tokens=list(src_tokens) if src_tokens is not None else [str(i) for i in src_ids],
        tgt_tokens=(list(tgt_tokens) if tgt_tokens is not None else ["<bos>", *map(str, tgt_ids)]),
        encoder_self=enc_self,
        decoder_self=dec_self,
        cross=cross,
    )


def _stack(blocks: Any, kind: str) -> np.ndarray:
    """Sown weights of `kind` in every `block_i`, batch row 0, stacked -> (L, H, Q, K)."""
    layers = [
        np.asarray(blocks[f"block_{i}"][kind]["attention_weights"][0])[0]
        for i in range(len(blocks))
        if f"block_{i}" in blocks
    ]
    return np.stack(layers) if layers else np.zeros((0, 0, 0, 0), np.float32)


def _sown_attention(cfg: ModelConfig, params: Any, src, src_len, tgt_in) -> Any:
    """The `intermediates` tree of one teacher-forced forward pass (jitted per shape)."""
    return _sown_jit(cfg, params, jnp.asarray(src), jnp.asarray(src_len), jnp.asarray(tgt_in))


def _sown(cfg: ModelConfig, params: Any, src, src_len, tgt_in) -> Any:
    _, state = Transformer(cfg).apply(
        {"params": params}, src, src_len, tgt_in, mutable=["intermediates"]
    )
    return state["intermediates"]


_sown_jit = jax.jit(_sown, static_argnames=("cfg",))
