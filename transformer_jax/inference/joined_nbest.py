"""The n-best of an input translated in parts, from its parts' n-bests.

An input of several sentences is translated sentence by sentence (`data.segmenting`), each
part searched (or sampled) on its own. Its n-best are the combinations of one hypothesis
per part with the highest summed score, each part's score being what its search ranks by:
rank 1 joins every part's best, so it is the plain translation, and the ranks after it
change the parts whose alternatives cost least. Decoding the whole input at once instead
(what n-best and a prefix did before) dropped or repeated sentences in the model's
hands ("Go. Run. I lost my keys." -> rank 1 "Va courir. J'ai perdu mes clés.").

Pure Python (no JAX): the JAX and CTranslate2 engines both use it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from transformer_jax.data.segmenting import join_translations
from transformer_jax.decoding.options import Hypotheses


def best_combinations(scores: Sequence[Sequence[float]], n: int) -> list[tuple[int, ...]]:
    """The `n` choices of one hypothesis per part with the highest summed score, best first.

    scores: per part, its hypotheses' scores, best first (as searches return them).
    Returns index tuples (one index per part); fewer than `n` when there are fewer
    combinations. Exact: a best-first walk from (0, ..., 0) that moves one part a rank down
    at a time, as for the k largest sums of sorted lists. Ties keep the lower indices first.
    """
    if not scores or any(len(part) == 0 for part in scores):
        return []
    total = lambda choice: sum(part[j] for part, j in zip(scores, choice, strict=True))
    start = (0,) * len(scores)
    frontier = [(-total(start), start)]
    seen = {start}
    out: list[tuple[int, ...]] = []
    while frontier and len(out) < n:
        _, choice = heapq.heappop(frontier)
        out.append(choice)
        for p in range(len(choice)):
            if choice[p] + 1 < len(scores[p]):
                after = (*choice[:p], choice[p] + 1, *choice[p + 1 :])
                if after not in seen:
                    seen.add(after)
                    heapq.heappush(frontier, (-total(after), after))
    return out


def joined_hypotheses(parts: Sequence[Sequence[tuple[str, float, float]]]) -> Hypotheses:
    """An input's `Hypotheses` from its parts' n-bests, each a list of (text, log P, score)
    best first: the `best_combinations` (as many as the longest list), texts joined
    (`join_translations`), log P and scores summed. Both engines call it."""
    n = max(len(hyps) for hyps in parts)
    choices = best_combinations([[score for _, _, score in hyps] for hyps in parts], n)
    chosen = [[hyps[j] for hyps, j in zip(parts, c, strict=True)] for c in choices]
    return Hypotheses(
        tuple(join_translations([text for text, _, _ in c]) for c in chosen),
        tuple(float(sum(log_prob for _, log_prob, _ in c)) for c in chosen),
        tuple(float(sum(score for _, _, score in c)) for c in chosen),
    )
