r"""Batch layouts on the real corpus: non-pad tokens/s of the train step, padded vs buckets vs
packed rows.

    python -m benchmarks.bucketing                                 # the fra_eng run's model
    python -m benchmarks.bucketing --dtype=bfloat16 --steps=40
    python -m benchmarks.bucketing --config=configs/fra_eng.py:variant=small
    python -m benchmarks.bucketing --config.data.max_src_len=32 --config.data.max_tgt_len=32 \
        "--config.data.bucket_boundaries=()"                    # buckets 8, 16, 24, 32

The question (issue: "with the project's own batching, non-pad tokens/s on fra-eng >= 1.5x
the same model fed fixed-length padded batches"). The modes use the same model, optimizer
and train step (built by `training.build`, as a run builds them) and the project's input
pipeline on the fra-eng training split; only the layout differs: `padded` pads every batch
to the maximum lengths, `buckets` pads to the smallest bucket boundary that fits
(`data.bucketing`), `packed` fills rows of the maximum lengths with several whole pairs
(`data.packing`, data/packing.py). With `data.batch_tokens` every mode gets batches of that
many slots per side (padded: batch_tokens // max length rows). Consecutive batches of the
train iterator are drawn first (host time is not measured: see
`benchmarks/input_pipeline.py`) and every shape is compiled; then the modes' steps
alternate (fair under a drifting load), each timed to completion (`block_until_ready`).
Throughput = non-pad source + target tokens of the timed steps / their total time.

The gain is bounded by the padding removed: at the fra_eng run's max length 14 only ~24 % of
the positions are padding (~19 % with its buckets 8/14), so expect ~1.1x there; at length 32
(the last command) padding drops from ~64 % to ~31 %.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from benchmarks import common
from benchmarks.time_to_bleu import add_config_args, load_config, parse_args
from transformer_jax.data import bucketing, create_input_pipeline
from transformer_jax.nn.precision import resolve_dtype
from transformer_jax.runtime import configure_process
from transformer_jax.training import DataParallel, build


def _shape(batch: dict[str, np.ndarray]) -> tuple[int, int]:
    return batch["src"].shape[-1], batch["tgt_in"].shape[-1]  # (S, T)


LAYOUTS = ("padded", "buckets", "packed")


class Mode:
    """One side of the comparison: the pipeline in one layout and its compiled step."""

    def __init__(self, config, layout: str, num_batches: int):
        cfg = config.copy_and_resolve_references()
        cfg.data.bucketing, cfg.data.packing = layout == "buckets", layout == "packed"
        if layout == "padded" and cfg.data.batch_tokens:  # the same slots, in full-width rows
            width = max(cfg.data.max_src_len, cfg.data.max_tgt_len)
            cfg.data.batch_size, cfg.data.batch_tokens = cfg.data.batch_tokens // width, 0
        parallel = DataParallel.create(cfg.parallelism)
        pipe = create_input_pipeline(cfg.data, row_multiple=parallel.num_local_devices)
        self.vocab = (pipe.src_tokenizer.vocab_size, pipe.tgt_tokenizer.vocab_size)
        built = build(
            cfg, src_vocab_size=self.vocab[0], tgt_vocab_size=self.vocab[1], parallel=parallel
        )
        self._put, self._step = parallel.put_batch, built.train_step
        self._state = parallel.put_replicated(built.init_state())
        # Compile every shape the epoch uses (one, or one per bucket), one step each.
        self.epoch = list(pipe.train_iter.epoch_batches(0))
        by_shape = {_shape(b): b for b in self.epoch}
        start = time.perf_counter()
        for batch in by_shape.values():
            self.run(batch)
        self.compile_s = time.perf_counter() - start
        self.shapes = sorted(by_shape)
        self.batches = [next(pipe.train_iter) for _ in range(num_batches)]  # from epoch start

    def run(self, batch: dict[str, np.ndarray]) -> float:
        """Seconds of one train step on `batch`, to completion."""
        start = time.perf_counter()
        self._state, metrics = self._step(self._state, self._put(batch))
        jax.block_until_ready(metrics)
        return time.perf_counter() - start


def measure(modes: dict[str, Mode], warmup: int, steps: int) -> dict[str, dict[str, float]]:
    """Steps of the modes interleaved, so that load from other jobs hits both alike."""
    times: dict[str, list[float]] = {name: [] for name in modes}
    for i in range(warmup + steps):
        for name, mode in modes.items():
            seconds = mode.run(mode.batches[i])
            if i >= warmup:
                times[name].append(seconds)
    out = {}
    for name, mode in modes.items():
        timed = mode.batches[warmup : warmup + steps]
        tokens = sum(common.non_pad_tokens(b) for b in timed)
        out[name] = {
            "tokens_per_s": tokens / sum(times[name]),
            "step_ms": 1000 * statistics.median(times[name]),
            "padding_timed": bucketing.padding_fraction(timed),
            "padding_epoch": bucketing.padding_fraction(mode.epoch),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_config_args(parser)
    parser.add_argument("--dtype", default="", choices=["", "float32", "bfloat16", "auto"])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per mode")
    args, overrides = parse_args(parser)
    if args.steps < 20:
        parser.error("--steps must be >= 20 (one number per mode from >= 20 timed steps).")

    try:
        config = load_config(args.config, overrides)
    except ValueError as error:  # ConfigError: a missing file, key or variant
        parser.error(str(error))
    configure_process(config)  # before the first computation: XLA flags, host memory
    if args.dtype:
        config.model.dtype = args.dtype
    m, d = config.model, config.data
    print(
        f"config {args.config} {' '.join(overrides)} | {m.num_encoder_layers}+"
        f"{m.num_decoder_layers} layers, D {m.model_dim}, F {m.ffn_dim}, {m.dtype} "
        f"(computes in {resolve_dtype(m.dtype)}) | global "
        f"batch {d.batch_size}, max lengths {d.max_src_len}/{d.max_tgt_len}, "
        f"{d.tokenizer} | devices {jax.devices()} | {args.steps} timed steps per mode",
        flush=True,
    )
    modes = {m: Mode(config, m, args.warmup + args.steps) for m in LAYOUTS}
    results = measure(modes, args.warmup, args.steps)
    print("| layout | batch shapes (S, T) | padding (timed) | padding (epoch 0) | "
          "non-pad tok/s | step ms (median) | compile s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        mode = modes[name]
        print(
            f"| {name} | {' '.join(f'{s}x{t}' for s, t in mode.shapes)} | "
            f"{r['padding_timed']:.1%} | {r['padding_epoch']:.1%} | {r['tokens_per_s']:,.0f} | "
            f"{r['step_ms']:.1f} | {mode.compile_s:.1f} |"
        )
    rate = {name: r["tokens_per_s"] for name, r in results.items()}
    for name in ("buckets", "packed"):
        ratio = rate[name] / rate["padded"]
        verdict = "met" if ratio >= 1.5 else "not met"
        print(f"\nnon-pad tok/s ratio {name} / padded: {ratio:.2f}x (target >= 1.5x: {verdict})")
    print(f"non-pad tok/s ratio packed / buckets: {rate['packed'] / rate['buckets']:.2f}x")
    print(f"vocabulary sizes (src, tgt): {modes['packed'].vocab}")


if __name__ == "__main__":
    main()
