"""The shapes a server decodes a merged batch in, on the engines' behalf: groups of like
output budgets (`like_budgets`, a CPU's calls) and the row counts batches pad to
(`row_counts`, what the warm-up compiles).

    like_budgets(translator, prepared_lines, hypotheses=4)   # -> [[0, 3, 5], [1, 2, 4]]
    row_counts(64)                                    # -> [1, 2, 4, 8, 16, 24, ..., 64]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from transformer_jax.decoding.shapes import LENGTH_BUCKET, call_rows, output_budget, round_up
from transformer_jax.inference import Translator

# What like_budgets weighs, in hypothesis-steps (one hypothesis, one search step; ~16 us in a
# batched beam search of the README model on 2 EPYC cores): a decoding call's fixed cost
# (~3 ms of padding, placing and dispatch) and a search step's (~0.1 ms, whatever its rows).
CALL_COST, STEP_COST = 192, 8


def like_budgets(
    translator: Translator, lines: Sequence[str], hypotheses: int = 1
) -> list[list[int]]:
    """The indices of `lines` (prepared) in groups of like output budgets, shortest first:
    the batches a CPU server decodes a merged batch in. A search runs every row of a batch
    until its longest sentence ends, so a batch of mixed lengths costs rows x the longest
    budget: 64 random test sentences of the README run (1-15 words), beam 4, took 0.99 s in
    one batch and 0.26 s in four of one budget each (2 EPYC cores; 0.44 s one at a time).
    Neighbouring budgets (source tokens rounded up to `LENGTH_BUCKET`) share a group where
    one call costs less than two: a call costs `CALL_COST`, and each step of its budget
    `STEP_COST` + its rows (padded as `call_rows` pads them) x `hypotheses` (beam or
    samples); so a few lines mostly stay one batch. The warm-up compiled every row count:
    the groups' batches compile nothing new."""
    settings = translator.settings
    budget = functools.partial(
        output_budget,
        max_len_a=settings["max_len_a"],
        max_len_b=settings["max_len_b"],
        max_decode_len=settings["max_decode_len"],
    )
    by_width: dict[int, list[int]] = {}
    for i, line in enumerate(lines):
        tokens = len(translator.src_tokenizer.encode(line)) + 1  # with <eos>
        by_width.setdefault(round_up(tokens, LENGTH_BUCKET), []).append(i)

    def cost(group: list[int], width: int) -> int:
        rows = call_rows(len(group), settings["batch_size"])
        return CALL_COST + budget(width) * (STEP_COST + rows * hypotheses)

    groups: list[tuple[int, list[int]]] = []  # (the longest width, its lines), widths rising
    for width in sorted(by_width):
        group = by_width[width]
        if groups:
            last_width, last = groups[-1]
            if cost(last + group, width) <= cost(last, last_width) + cost(group, width):
                groups[-1] = (width, last + group)
                continue
        groups.append((width, group))
    return [group for _, group in groups]


def row_counts(max_rows: int) -> list[int]:
    """The row counts batches of 1..max_rows sentences pad to (`decoding.shapes.
    call_rows`: powers of two up to 8, multiples of 8 above, `max_rows` for a full batch)."""
    return sorted({call_rows(n, max_rows) for n in range(1, max_rows + 1)})
