r"""Subword sampling: the project's seeded draws against SentencePiece's own sampler.

    python -m benchmarks.sampling_draws                       # deep_sampled: alpha 0.5, nbest -1
    python -m benchmarks.sampling_draws --nbest -1 8 --sentences 2000

On `--sentences` training sentences of the `deep_sampled` config's corpus (both sides of
evenly spaced training pairs), with its tokenizer (trained, or reused from the data
directory's cache), one row per sampler: pieces per sentence over `--draws` draws, the
share of draws that differ from the best segmentation, distinct segmentations per sentence
among the draws, the share of sentences a fresh process draws alike with the same seed,
and host time to draw one batch (its source and target sentences; batches of
`data.batch_tokens` best-segmentation pieces a side; wall and CPU milliseconds, timed in
turns with SentencePiece's sampler on one thread, the median over `--repeats` turns).
"best" is the plain encoding. The project's draws (`SentencePieceTokenizer.encode_sampled`)
follow SentencePiece's rules with numpy's generator; SentencePiece's own
(`encode(enable_sampling=True)` after `set_random_generator_seed`) repeat within one
process only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from transformer_jax.data import datasets, tokenizers
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer

Draw = Callable[[Sequence[str], int], list[list[int]]]  # (texts, seed) -> ids per text

# A fresh interpreter's draws: argv model directory, texts and settings (JSON) -> JSON.
_FRESH = """
import json, sys
import sentencepiece as spm
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer
tok = SentencePieceTokenizer.load(sys.argv[1])
texts, (alpha, nbest, seed) = json.loads(sys.argv[2]), json.loads(sys.argv[3])
spm.set_random_generator_seed(seed)
theirs = tok._sp.encode(texts, enable_sampling=True, alpha=alpha, nbest_size=nbest, num_threads=1)
ours = tok.encode_sampled(texts, alpha=alpha, nbest=nbest, seed=seed)
print(json.dumps({"ours": ours, "SentencePiece": theirs}))
"""


def samplers(tok: SentencePieceTokenizer, alpha: float, nbest: int) -> dict[str, Draw]:
    def theirs(texts: Sequence[str], seed: int) -> list[list[int]]:
        spm.set_random_generator_seed(seed)
        return tok._sp.encode(
            list(texts), enable_sampling=True, alpha=alpha, nbest_size=nbest, num_threads=1
        )

    def ours(texts: Sequence[str], seed: int) -> list[list[int]]:
        return tok.encode_sampled(texts, alpha=alpha, nbest=nbest, seed=seed)

    return {"SentencePiece": theirs, "ours": ours}


def draw_stats(draws: list[list[list[int]]], best: list[list[int]]) -> dict[str, float]:
    """draws[k][i]: draw k of sentence i. Pieces per sentence, % of draws other than the best
    segmentation, mean distinct segmentations per sentence among the draws."""
    differ = [d != b for draw in draws for d, b in zip(draw, best, strict=True)]
    distinct = [len({tuple(d[i]) for d in draws}) for i in range(len(best))]
    return {
        "pieces": float(np.mean([len(ids) for draw in draws for ids in draw])),
        "differ_pct": 100 * float(np.mean(differ)),
        "distinct": float(np.mean(distinct)),
    }


def batches(pairs: Sequence[tuple[str, str]], lengths: np.ndarray, tokens: int) -> list:
    """Consecutive runs of `pairs` whose source sides hold ~`tokens` best-segmentation
    pieces: (sources, targets) of each whole batch."""
    ends = np.searchsorted(np.cumsum(lengths), np.arange(tokens, lengths.sum() + 1, tokens))
    if not len(ends):
        raise SystemExit(
            f"{len(pairs)} pairs hold {lengths.sum()} source pieces, less than one batch of "
            f"{tokens}: raise --sentences."
        )
    starts = np.r_[0, ends[:-1]]
    return [
        ([s for s, _ in pairs[a:b]], [t for _, t in pairs[a:b]])
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


def draw_ms(draw: Draw, chunks: list, turn: int) -> tuple[float, float]:
    """Median (wall, CPU) milliseconds to draw both sides of one batch (seeds vary with
    `turn`). CPU time counts every thread of the process and not other processes' load."""
    wall, cpu = [], []
    for k, (src, tgt) in enumerate(chunks):
        start, start_cpu = time.perf_counter(), time.process_time()
        draw(src, 2 * k + 1000 * turn)
        draw(tgt, 2 * k + 1000 * turn + 1)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return 1000 * float(np.median(wall)), 1000 * float(np.median(cpu))


def fresh_process(model_dir: Path, texts: list[str], alpha: float, nbest: int, seed: int):
    setting = json.dumps([alpha, nbest, seed])
    result = subprocess.run(
        [sys.executable, "-c", _FRESH, str(model_dir), json.dumps(texts), setting],
        capture_output=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return json.loads(result.stdout)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="deep_sampled", help="a configs/fra_eng.py variant")
    parser.add_argument("--data_dir", default=None, help="default: the config's data.data_dir")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=None, help="default: the config's")
    parser.add_argument("--nbest", type=int, nargs="+", default=None, help="default: config's")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    from configs import fra_eng

    cfg = fra_eng.get_config(args.config).data
    if args.data_dir:
        cfg.data_dir = args.data_dir
    alpha = args.alpha if args.alpha is not None else cfg.sp_sampling_alpha
    nbests = args.nbest or [cfg.sp_sampling_nbest]
    train = datasets.load_split_pairs(cfg, cfg.train_split)
    src_tok, tgt_tok = tokenizers.build_tokenizers(cfg, train, Path(cfg.data_dir) / "tokenizers")
    if src_tok is not tgt_tok:
        raise SystemExit("FATAL: this benchmark reads one shared SentencePiece model.")
    tok = src_tok
    picked = np.linspace(0, len(train) - 1, args.sentences // 2).astype(int)
    pairs = [train[i] for i in picked]
    texts = [s for s, _ in pairs] + [t for _, t in pairs]
    best = [tok.encode(t) for t in texts]

    def plain(texts: Sequence[str], seed: int) -> list[list[int]]:
        return [tok.encode(text) for text in texts]

    chunks = batches(pairs, np.array([len(b) for b in best[: len(pairs)]]), cfg.batch_tokens)
    print(
        f"{len(texts)} sentences of {cfg.train_split} ({len(chunks)} batches of ~"
        f"{cfg.batch_tokens} source pieces), vocabulary {tok.vocab_size}, alpha {alpha}, "
        f"{args.draws} draws"
    )
    rows = [("best", "", draw_stats([best], best), 100.0, draw_ms(plain, chunks, 0))]
    with tempfile.TemporaryDirectory() as model_dir:
        tok.save(model_dir)
        for nbest in nbests:
            draw = samplers(tok, alpha, nbest)
            fresh = fresh_process(Path(model_dir), texts, alpha, nbest, seed=0)
            stats, alike, ms = {}, {}, {}
            for name, f in draw.items():  # (also the warm-up of the timing below)
                stats[name] = draw_stats([f(texts, seed) for seed in range(args.draws)], best)
                same = [a == b for a, b in zip(f(texts, 0), fresh[name], strict=True)]
                alike[name] = 100 * float(np.mean(same))
                ms[name] = []
            for turn in range(args.repeats):  # in turns: the VM's speed drifts
                for name, f in draw.items():
                    ms[name].append(draw_ms(f, chunks, turn))
            for name in draw:
                median = tuple(np.median(ms[name], axis=0).tolist())
                rows.append((name, nbest, stats[name], alike[name], median))
    print(
        "| sampler | nbest | pieces / sentence | draws ≠ best | distinct of "
        f"{args.draws} draws | alike in a fresh process | ms a batch (2 sides): wall / CPU |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, nbest, s, alike, (wall, cpu) in rows:
        print(
            f"| {name} | {nbest} | {s['pieces']:.2f} | {s['differ_pct']:.1f} % | "
            f"{s['distinct']:.2f} | {alike:.1f} % | {wall:.1f} / {cpu:.1f} |"
        )


if __name__ == "__main__":
    main()
