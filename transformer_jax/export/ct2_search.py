"""CTranslate2's search as the JAX engine's: each row's output budget, the search rules, and
the calls that rank CTranslate2's hypotheses by our length penalty.

    budgets = row_budgets(rows, prefixes, settings, limit)     # (R,) as BatchDecoder.row_limits
    for budget, group in by_budget(batch, budgets): ...         # one call per budget
    best_hypotheses(translator, sources, beam_size=4, alpha=0.6, budget=32, batch_size=64)
    nbest_hypotheses(translator, sources, options=DecodeOptions(...), budget=32, batch_size=64)

Used by `export.ct2_translate.translate_detailed`, which prepares, encodes and batches the
inputs and words the notes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_jax.data.vocab import BOS, EOS, EOS_ID, PAD
from transformer_jax.decoding.options import DecodeOptions
from transformer_jax.decoding.search import length_penalty
from transformer_jax.decoding.shapes import LENGTH_BUCKET, output_budget, output_cap, round_up

# CTranslate2's beam search differs from ours in bookkeeping: it refills a finished
# hypothesis's beam slot from 2W candidates (ours lets the slot go), and stops once
# W·patience hypotheses have finished (without a length penalty, once the best has); ours
# stops once no live hypothesis can still enter its W best. Its length penalty divides log P
# by len^α, ours by GNMT's ((5 + len) / 6)^α: no α maps one onto the other (with α = 0.6,
# 1,718 of 2,000 corpus sentences came out equal). So the engine asks CTranslate2 for the 2W
# hypotheses that finish first, with their log P (a penalty of RAW_PENALTY: len^1e-30 = 1,
# and no early stop), and ranks them by ours. Not equal by construction (the beams can hold
# different hypotheses), but equal to the JAX engine on every sentence measured
# (tests/test_export_ctranslate2.py; patience 1: 1,997 of 2,000).
PATIENCE = 2
RAW_PENALTY = 1e-30
# The JAX search's rules (`decoding.search.ruled_out`, min_len=1): `<eos>` not as the first
# token, and never `<pad>` or `<bos>`. CTranslate2 applies them by renormalising its
# distribution over the tokens left (ours takes them out of the search and keeps the model's
# log P), so a source is decoded with them only where its output broke one (`_with_rules`):
# elsewhere the two engines search and score alike; there, CTranslate2's log P is that of
# the renormalised distribution, and its beam search may rank otherwise (greedy picks the
# same); a trained model gives these tokens almost no mass.
FREE = dict(min_decoding_length=0)
RULED_OUT = dict(min_decoding_length=1, suppress_sequences=[[PAD], [BOS]])


def row_budgets(
    rows: list[list[int]], targets: list[list[str]], settings: dict[str, Any], limit: int
) -> list[int]:
    """Each row's own output budget, as the JAX engine's (`BatchDecoder.row_limits`): the
    budget of its own length rounded up to LENGTH_BUCKET (at most `output_cap`, within the
    position table), or max_decode_len; without a fixed max_decode_len, room for its forced
    prefix and max_len_b tokens after it (CTranslate2's length counts the prefix)."""
    a, b, fixed = settings["max_len_a"], settings["max_len_b"], settings["max_decode_len"]
    cap = None if fixed else output_cap(settings["trained_len"], max_len_a=a, max_len_b=b)
    budgets = []
    for row, target in zip(rows, targets, strict=True):
        budget = output_budget(
            round_up(len(row), LENGTH_BUCKET), max_len_a=a, max_len_b=b,
            max_decode_len=fixed, position_limit=limit, cap=cap,
        )  # fmt: skip
        if target and not fixed:
            budget = min(max(budget, round_up(len(target) + b, LENGTH_BUCKET)), limit)
        budgets.append(budget)
    return budgets


def by_budget(batch: list[int], budgets: list[int]) -> list[tuple[int, list[int]]]:
    """A sorted batch's rows grouped by their budgets: one CTranslate2 call per budget."""
    groups: dict[int, list[int]] = {}
    for r in batch:
        groups.setdefault(budgets[r], []).append(r)
    return sorted(groups.items())


def nbest_hypotheses(
    translator: Any,
    sources: list[list[str]],
    *,
    options: DecodeOptions,
    budget: int,
    batch_size: int,
    prefixes: list[list[str]] | None = None,
    vocab_size: int | None = None,
) -> list[list[tuple[list[str], float, float]]]:
    """Each source's n-best as (tokens without `<eos>`, log P, log P / ((5 + len) / 6)^α),
    best first, by CTranslate2: beam search re-ranked by our length penalty (PATIENCE), its
    greedy search, or `options.nbest` samples (the source repeated; `sampling_temperature`,
    `sampling_topk` (our 0 = all is its 0), `sampling_topp`; `translate_detailed` seeds them).
    `prefixes`: forced target tokens per
    source ([] = none; CTranslate2's `target_prefix`, kept in the output). `vocab_size`: the
    target vocabulary's; a top_k of at least that many is every token (0), as in the JAX
    sampler, where CTranslate2 refuses a top_k over its vocabulary."""
    sampling, n = options.sampling, options.nbest
    copies = n if sampling else 1
    batch = [src for src in sources for _ in range(copies)]
    target_prefix = None
    if prefixes is not None and any(prefixes):
        target_prefix = [p or None for p in prefixes for _ in range(copies)]
    beam = 1 if sampling else options.beam_size
    kwargs = dict(
        max_batch_size=batch_size,
        beam_size=beam,
        max_decoding_length=budget,
        max_input_length=0,  # never cut a source
        length_penalty=RAW_PENALTY,  # scores are log P: len^1e-30 = 1
        return_scores=True,
        return_end_token=True,
    )
    if sampling:  # seeded by translate_detailed, which opens the translator after
        kwargs.update(
            sampling_temperature=options.temperature,
            sampling_topk=0 if vocab_size and options.top_k >= vocab_size else options.top_k,
            sampling_topp=options.top_p,
        )
    elif beam > 1:
        kwargs.update(patience=PATIENCE, num_hypotheses=max(n, round(beam * PATIENCE)))
    results = _with_rules(translator, batch, target_prefix, kwargs)
    alpha = np.float32(options.alpha)
    out = []
    for k in range(len(sources)):
        found = [
            (list(tokens), float(score))
            for result in results[k * copies : (k + 1) * copies]
            for tokens, score in zip(result.hypotheses, result.scores, strict=True)
        ]
        ranked = []
        for tokens, log_prob in found:
            # len counts <eos> (kept by return_end_token), as ours does.
            score = float(log_prob / length_penalty(len(tokens), alpha, xp=np))
            ranked.append(
                (tokens[:-1] if tokens and tokens[-1] == EOS else tokens, log_prob, score)
            )
        ranked.sort(key=lambda h: -h[2])  # stable: ties keep CTranslate2's order
        out.append(ranked[:n])
    return out


def fit_positions(row: list[int], limit: int) -> list[list[int]]:
    """`row` (ids ending in `<eos>`) if it has at most `limit` tokens, else its tokens in
    consecutive parts of `limit` - 1, each with its `<eos>`: CTranslate2 cannot run a source
    longer than the exported position table (the JAX engine translates a sinusoidal model's
    over-long sentence whole)."""
    if len(row) <= limit:
        return [row]
    body, size = row[:-1], max(1, limit - 1)
    return [[*body[k : k + size], EOS_ID] for k in range(0, len(body), size)]


def best_hypotheses(
    translator: Any,
    sources: list[list[str]],
    *,
    beam_size: int,
    alpha: float,
    budget: int,
    batch_size: int,
) -> list[list[str]]:
    """The best output tokens (without `<eos>`) for each source (tokens, without `<eos>`):
    CTranslate2's greedy search, or its beam search re-ranked by our length penalty (see
    PATIENCE), at most `budget` tokens with `<eos>`."""
    options = dict(
        max_batch_size=batch_size,
        beam_size=beam_size,
        max_decoding_length=budget,
        max_input_length=0,  # never cut a source
    )
    if beam_size == 1:  # greedy: no penalty to apply
        return [result.hypotheses[0] for result in _with_rules(translator, sources, None, options)]
    options.update(
        patience=PATIENCE, num_hypotheses=round(beam_size * PATIENCE),
        length_penalty=RAW_PENALTY, return_scores=True, return_end_token=True,
    )  # fmt: skip
    results = _with_rules(translator, sources, None, options)
    best = []
    for result in results:
        # len counts <eos> (kept by return_end_token), as ours does; a hypothesis cut at the
        # budget has `budget` tokens in both.
        lengths = np.array([len(h) for h in result.hypotheses])
        scores = np.asarray(result.scores, np.float32)  # log P: divided by len^1e-30 = 1
        ranked = scores / length_penalty(lengths, np.float32(alpha), xp=np)
        tokens = result.hypotheses[int(np.argmax(ranked))]  # ties: the first, as top_k
        best.append(tokens[:-1] if tokens and tokens[-1] == EOS else tokens)
    return best


def _with_rules(
    translator: Any, sources: list[list[str]], prefixes: list | None, options: dict[str, Any]
) -> list[Any]:
    """`translator.translate_batch` without the search rules (FREE), then again with them
    (RULED_OUT) for the sources whose hypotheses broke one: `<eos>` first (an empty
    hypothesis without a prefix), or a `<pad>` or `<bos>` anywhere (see RULED_OUT)."""
    results = list(translator.translate_batch(sources, prefixes, **options, **FREE))
    broke = [
        k
        for k, result in enumerate(results)
        if any(
            PAD in tokens
            or BOS in tokens
            or (not (prefixes and prefixes[k]) and (not tokens or tokens[0] == EOS))
            for tokens in result.hypotheses
        )
    ]
    if broke:
        again = translator.translate_batch(
            [sources[k] for k in broke],
            [prefixes[k] for k in broke] if prefixes else None,
            **options,
            **RULED_OUT,
        )
        for k, result in zip(broke, again, strict=True):
            results[k] = result
    return results
