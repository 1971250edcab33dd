"""`inference.joined_nbest.best_combinations` against brute force."""

import itertools

import numpy as np

from transformer_jax.inference.joined_nbest import best_combinations


def brute_force(scores, n):
    choices = itertools.product(*(range(len(part)) for part in scores))
    total = lambda c: sum(part[j] for part, j in zip(scores, c, strict=True))
    return sorted(choices, key=lambda c: (-total(c), c))[:n]


def test_the_best_combination_joins_each_parts_best():
    assert best_combinations([[-1.0, -2.0], [-0.5, -0.6, -3.0]], 1) == [(0, 0)]
    assert best_combinations([[-1.0, -2.0], [-0.5, -0.6, -3.0]], 3) == [(0, 0), (0, 1), (1, 0)]
    assert best_combinations([[-1.0]], 4) == [(0,)]  # fewer combinations than asked
    assert best_combinations([], 2) == [] and best_combinations([[], [-1.0]], 2) == []


def summed(scores, choices):
    return [round(sum(p[j] for p, j in zip(scores, c, strict=True)), 6) for c in choices]


def test_best_combinations_equal_brute_force_sums():
    rng = np.random.default_rng(0)
    for _ in range(200):
        parts = int(rng.integers(1, 5))
        scores = [sorted(rng.normal(size=int(rng.integers(1, 5))).round(1), reverse=True)
                  for _ in range(parts)]  # fmt: skip
        n = int(rng.integers(1, 8))
        got = best_combinations(scores, n)
        want = brute_force(scores, n)
        # The same sums (ties may come in another order).
        assert summed(scores, got) == summed(scores, want)
        assert len(set(got)) == len(got) == min(n, int(np.prod([len(p) for p in scores])))
