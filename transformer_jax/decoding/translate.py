"""Text in, text out: tokenise, batch, decode over the local devices, detokenise.

    translate(model_config, params, src_tokenizer, tgt_tokenizer, ["go .", "i lost ."])

Sources are `tokenizer.encode(text) + [<eos>]`, as in training (d2l §9.5 `build_array_nmt`);
words outside the vocabulary become `<unk>` in the tokenizer. Sentences are sorted by length
so a batch holds similar lengths, padded to a few fixed shapes (one compilation each), and
returned in the input order.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from transformer_jax.data.vocab import BOS_ID, EOS_ID
from transformer_jax.decoding import model_decode
from transformer_jax.nn import ModelConfig, Transformer

# Source widths are padded up to a multiple of this, so few shapes are ever compiled.
LENGTH_BUCKET = 8
EMPTY_MESSAGE = "<empty input: nothing to translate>"


class Tokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class DecodingWarning(UserWarning):
    """An input was changed to be decodable (truncated), or could not be decoded (empty)."""


@dataclasses.dataclass
class EncodedSources:
    """Source ids (tokens + `<eos>`, truncated; [] for an empty sentence) and what was changed.

    truncated: {sentence index: its length with `<eos>` before truncation}; empty: indices.
    """

    ids: list[list[int]]
    truncated: dict[int, int]
    empty: list[int]


def encode_sources(
    tokenizer: Tokenizer, sentences: Sequence[str], max_len: int, *, warn: bool = True
) -> EncodedSources:
    """Token ids + `<eos>` per sentence, truncated to `max_len` ids; [] for an empty sentence.

    Truncation keeps the first `max_len` ids, as the book's `truncate_pad` does in training.
    With `warn`, one `DecodingWarning` names the empty sentences and one the truncated ones
    (a summary, not one warning per sentence, so a test split does not flood the log).
    """
    out = EncodedSources([], {}, [])
    for i, sentence in enumerate(sentences):
        if not sentence.strip():
            out.empty.append(i)
            out.ids.append([])
            continue
        ids = list(tokenizer.encode(sentence)) + [EOS_ID]
        if len(ids) > max_len:
            out.truncated[i] = len(ids)
            ids = ids[:max_len]
        out.ids.append(ids)
    if warn and out.empty:
        which = ", ".join(f"#{i}" for i in out.empty[:10])
        noun = "Sentence" if len(out.empty) == 1 else f"{len(out.empty)} sentences:"
        warnings.warn(
            f"{noun} {which} {'is' if len(out.empty) == 1 else 'are'} empty; nothing to "
            "translate (the translation is empty).",
            DecodingWarning,
            2,
        )
    if warn and out.truncated:
        (first, n), count = next(iter(out.truncated.items())), len(out.truncated)
        more = f" and {count - 1} more" if count > 1 else ""
        warnings.warn(
            f"Sentence #{first} has {n} tokens with <eos>, more than the limit {max_len}{more}; "
            f"decoding only the first {max_len} ({sentences[first][:40]!r}...).",
            DecodingWarning,
            2,
        )
    return out


def source_ids(tokenizer: Tokenizer, sentence: str, max_len: int) -> list[int]:
    """`encode_sources` of one sentence: ids + `<eos>`, truncated with a warning; [] if empty."""
    return encode_sources(tokenizer, [sentence], max_len).ids[0]


def default_max_decode_len(config: ModelConfig, src_width: int) -> int:
    """Room for a translation twice the (padded) source length plus 10, within model.max_len."""
    return min(config.max_len, 2 * src_width + 10)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pad_batch(rows: list[list[int]], num_rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pad to (num_rows, width); filler rows are a lone <eos> so no row is fully masked."""
    src = np.zeros((num_rows, width), np.int32)
    src_len = np.ones((num_rows,), np.int32)
    src[:, 0] = EOS_ID
    for r, ids in enumerate(rows):
        src[r, : len(ids)] = ids
        src_len[r] = len(ids)
    return src, src_len


def _batch_rows(n: int, batch_size: int, num_devices: int) -> int:
    """Rows of a batch of n sentences: batch_size, or a power of two for a short last batch."""
    rows = batch_size if n >= batch_size else 1 << max(0, n - 1).bit_length()
    return _round_up(max(rows, num_devices), num_devices)


def decode_ids(
    model_config: ModelConfig,
    params: Any,
    sources: Sequence[Sequence[int]],
    *,
    beam_size: int = 1,
    max_decode_len: int | None = None,
    batch_size: int = 64,
    alpha: float = 0.6,
) -> list[np.ndarray]:
    """Decode non-empty id lists (each already ending in <eos>) -> generated ids per source.

    Returns one (L,) array per source (the best hypothesis: `<eos>` then `<pad>` at the end).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    cfg = model_config.replace(deterministic=True, decode=False)
    mesh = model_decode.local_mesh()
    num_devices = mesh.devices.size
    # Once, replicated on every device: not a host-to-device copy per batch.
    params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[np.ndarray] = [np.zeros((0,), np.int32)] * len(sources)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        rows = [list(sources[i]) for i in chunk]
        width = min(_round_up(max(map(len, rows)), LENGTH_BUCKET), cfg.max_len)
        length = max_decode_len or default_max_decode_len(cfg, width)
        src, src_len = _pad_batch(rows, _batch_rows(len(rows), batch_size, num_devices), width)
        decode = model_decode.sharded_decoder(
            cfg, beam_size=beam_size, max_decode_len=length, alpha=float(alpha), mesh=mesh
        )
        tokens = np.asarray(decode(params, src, src_len))  # (B, L) or (B, W, L)
        if tokens.ndim == 3:
            tokens = tokens[:, 0]  # the best of the n-best
        for r, i in enumerate(chunk):
            out[i] = tokens[r]
    return out


def translate(
    model_config: ModelConfig,
    params: Any,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    sentences: Sequence[str],
    *,
    beam_size: int = 1,
    max_decode_len: int | None = None,
    batch_size: int = 64,
    alpha: float = 0.6,
    max_src_len: int | None = None,
) -> list[str]:
    """Translate sentences (already preprocessed as the tokenizer expects) -> texts.

    beam_size 1 is greedy search; larger beams rank by log P / ((5 + len) / 6)^alpha.
    Sources longer than `max_src_len` (default: model.max_len) tokens with `<eos>` are
    truncated with a `DecodingWarning`; an empty sentence gets a warning and the empty
    translation "". `max_decode_len` defaults to 2 × source width + 10, within model.max_len.
    """
    limit = min(max_src_len or model_config.max_len, model_config.max_len)
    ids = encode_sources(src_tokenizer, sentences, limit).ids
    todo = [i for i, x in enumerate(ids) if x]
    decoded = decode_ids(
        model_config,
        params,
        [ids[i] for i in todo],
        beam_size=beam_size,
        max_decode_len=max_decode_len,
        batch_size=batch_size,
        alpha=alpha,
    )
    out = [""] * len(sentences)
    for i, tokens in zip(todo, decoded, strict=True):
        out[i] = tgt_tokenizer.decode([int(t) for t in tokens])
    return out


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
    if max(s, t) > cfg.max_len:
        raise ValueError(f"pair of lengths ({s}, {t}) exceeds model.max_len={cfg.max_len}.")
    width_s = min(_round_up(s, LENGTH_BUCKET), cfg.max_len)
    width_t = min(_round_up(t, LENGTH_BUCKET), cfg.max_len)
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
