r"""Why long sentences score lower: rare words and how far human translations agree, by length.

    python -m benchmarks.length_gap --workdir=runs/fra_eng

Reads the run's data (no model): for each row of source lengths (`evaluation.bleu.LENGTH_BINS`
words of the detokenised source) of the test split, the share of source and target tokens
that the training split never shows or shows at most `--rare` times, and how many pairs hold
such a source word. Then, over every split, the sources with two or more distinct
translations: the first translation scored as a hypothesis against the second (sacreBLEU),
by the same rows: the single-reference BLEU a second human translator gets at each length.
If it fell with length, a low score on long sentences would be partly the metric's.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Callable, Sequence
from typing import Any

from transformer_jax import launch
from transformer_jax.evaluation.bleu import length_bin_name

Pairs = Sequence[tuple[str, str]]


def _bin_name(words: int, bins: Sequence[tuple[int, int | None]]) -> str | None:
    for first, last in bins:
        if words >= first and (last is None or words <= last):
            return length_bin_name(first, last)
    return None


def rare_word_rows(
    train: Pairs,
    test: Pairs,
    *,
    rare: int,
    words_of: Callable[[str], int],
    bins: Sequence[tuple[int, int | None]],
) -> list[dict[str, Any]]:
    """One row per length bin of the test pairs (bins by `words_of(source)`), in `bins` order.

    Tokens are whitespace tokens of the pairs as given. Each row: words, pairs, and the
    percentages src_unseen / src_rare / tgt_unseen / tgt_rare (tokens whose training count is
    0 / at most `rare`) and pairs_with_rare_src (pairs holding a source token seen <= `rare`
    times). Percentages are None for an empty bin.
    """
    counts = [
        collections.Counter(w for pair in train for w in pair[side].split()) for side in (0, 1)
    ]
    labels = [length_bin_name(first, last) for first, last in bins]
    sums: dict[str, collections.Counter] = {}
    for source, target in test:
        label = _bin_name(words_of(source), bins)
        if label is None:
            continue
        row = sums.setdefault(label, collections.Counter())
        row["pairs"] += 1
        for side, text in ((0, source), (1, target)):
            seen = [counts[side][w] for w in text.split()]
            key = ("src", "tgt")[side]
            row[f"{key}_tokens"] += len(seen)
            row[f"{key}_unseen"] += sum(c == 0 for c in seen)
            row[f"{key}_rare"] += sum(c <= rare for c in seen)
            if side == 0:
                row["pairs_with_rare_src"] += any(c <= rare for c in seen)
    return [_percentages(label, sums.get(label, collections.Counter())) for label in labels]


def _percentages(label: str, row: collections.Counter) -> dict[str, Any]:
    def pct(part: str, whole: str) -> float | None:
        return 100.0 * row[part] / row[whole] if row[whole] else None

    return {
        "words": label,
        "pairs": row["pairs"],
        "src_unseen": pct("src_unseen", "src_tokens"),
        "src_rare": pct("src_rare", "src_tokens"),
        "tgt_unseen": pct("tgt_unseen", "tgt_tokens"),
        "tgt_rare": pct("tgt_rare", "tgt_tokens"),
        "pairs_with_rare_src": pct("pairs_with_rare_src", "pairs"),
    }


def reference_pairs(pairs: Pairs) -> tuple[list[str], list[str], list[str]]:
    """(sources, first translations, second translations) of every source in `pairs` with two
    or more distinct translations, in order of first appearance (repeats of one translation
    do not count)."""
    translations: dict[str, list[str]] = {}
    for source, target in pairs:
        seen = translations.setdefault(source, [])
        if target not in seen:
            seen.append(target)
    chosen = [(s, ts[0], ts[1]) for s, ts in translations.items() if len(ts) >= 2]
    return [s for s, _, _ in chosen], [a for _, a, _ in chosen], [b for _, _, b in chosen]


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} %"


def format_rare_rows(rows: Sequence[dict[str, Any]], rare: int) -> list[str]:
    """Markdown lines of `rare_word_rows`."""
    lines = [
        f"| source words | test pairs | source tokens unseen in training | seen <= {rare} times"
        f" | pairs with a source word seen <= {rare} times | target tokens unseen"
        f" | seen <= {rare} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r["src_unseen"], r["src_rare"], r["pairs_with_rare_src"], r["tgt_unseen"]]
        cells += [r["tgt_rare"]]
        lines.append(f"| {r['words']} | {r['pairs']:,} | " + " | ".join(map(_cell, cells)) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    # argparse, not absl flags: importing this module (as its tests do) defines no flags.
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--workdir", required=True, help="Training workdir: its config names the data."
    )
    parser.add_argument(
        "--rare",
        type=int,
        default=5,
        help="A word seen at most this many times in training is rare.",
    )
    args = parser.parse_args(argv)
    launch.quiet_library_logs()
    from transformer_jax.data import load_split_pairs
    from transformer_jax.data.config import is_book_style
    from transformer_jax.data.text_form import detokenize_book
    from transformer_jax.evaluation.bleu import (
        LENGTH_BINS,
        bleu_by_length,
        corpus_scores,
        format_length_table,
    )
    from transformer_jax.workdir.checkpoints import NoCheckpointError, load_config

    try:
        config = load_config(args.workdir)
    except (NoCheckpointError, ValueError) as error:
        launch.fatal(str(error))
    detok = detokenize_book if is_book_style(config.data) else (lambda text: text)
    words_of = lambda source: len(detok(source).split())  # noqa: E731  (as the report counts)
    data = config.data
    # Each split read once: the rare-word table and the human pairs both use them.
    splits = {
        s: load_split_pairs(data, s) for s in (data.train_split, data.eval_split, data.test_split)
    }
    train, test = splits[data.train_split], splits[data.test_split]
    rows = rare_word_rows(train, test, rare=args.rare, words_of=words_of, bins=LENGTH_BINS)
    print(
        f"## Rare words by source length ({config.data.test_split} against "
        f"{config.data.train_split}, whitespace tokens)\n"
    )
    print("\n".join(format_rare_rows(rows, args.rare)))

    everything = [pair for pairs in splits.values() for pair in pairs]
    sources, first, second = reference_pairs(everything)
    print(
        f"\n## One human translation against another ({len(sources):,} sources of "
        f"{', '.join(splits)} with 2+ translations; sacreBLEU, detokenised)\n"
    )
    if not sources:
        print("No source has two translations.")
        return
    hyps, refs = [detok(t) for t in first], [detok(t) for t in second]
    total = {"count": len(sources), **corpus_scores(hyps, refs, n_bootstrap=0)}
    table = bleu_by_length([detok(s) for s in sources], hyps, refs, n_bootstrap=0)
    print("\n".join(format_length_table(table, total)))


if __name__ == "__main__":
    main()
