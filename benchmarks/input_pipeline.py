r"""Input pipeline throughput vs. what the train step consumes, so data never starves training.

    python benchmarks/input_pipeline.py                       # real corpus, project data dir
    python benchmarks/input_pipeline.py --seconds=5 --batch_size=256

Prints, per tokenizer and bucketing setting: examples/s and real (non-pad) tokens/s of the
train iterator (host numpy batches, as the train loop receives them), the padding fraction over
one epoch, and the train step's consumption in examples/s (the fra_eng config's model, if
`transformer_jax.training` is importable). The pipeline keeps up if its examples/s exceed the
step's by a wide margin; batches are produced on the host thread, between steps.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
import tensorflow_datasets as tfds

from transformer_jax.data import bucketing, config, create_input_pipeline, datasets


def pipeline_rate(train_iter, seconds: float) -> tuple[float, float]:
    """(examples/s, real tokens/s) of `next(train_iter)` over about `seconds`."""
    examples = tokens = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        batch = next(train_iter)
        examples += batch["src_len"].size
        tokens += int(batch["src_len"].sum()) + int(batch["tgt_weight"].sum())
    return examples / elapsed, tokens / elapsed


def step_rate(data_cfg, pipe, seconds: float) -> str:
    """Examples/s the fra_eng config's train step consumes on this machine, or why not."""
    try:
        from configs import fra_eng
        from transformer_jax.training import build
    except ImportError as error:
        return f"n/a (training not built yet: {error})"
    try:
        cfg = fra_eng.get_config()
        cfg.data = data_cfg
        built = build(
            cfg,
            src_vocab_size=pipe.src_tokenizer.vocab_size,
            tgt_vocab_size=pipe.tgt_tokenizer.vocab_size,
        )
        step, parallel = built.train_step, built.parallel
        state = parallel.put_replicated(built.init_state())
        batches = [next(pipe.train_iter) for _ in range(32)]
        # Compile once per bucket shape before timing (one step each: steps can take seconds).
        by_shape = {(b["src"].shape, b["tgt_in"].shape): b for b in batches}
        for batch in by_shape.values():
            state, metrics = step(state, parallel.put_batch(batch))
        jax.block_until_ready(metrics)
        examples, start, i = 0, time.perf_counter(), 0
        while i < 2 or time.perf_counter() - start < seconds:
            batch = batches[i % len(batches)]
            state, metrics = step(state, parallel.put_batch(batch))
            jax.block_until_ready(metrics)
            examples += batch["src_len"].size
            i += 1
        return f"{examples / (time.perf_counter() - start):,.0f}"
    except Exception as error:  # noqa: BLE001 (a benchmark reports, it does not crash)
        return f"n/a ({type(error).__name__}: {error})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=config.data_config().data_dir)
    parser.add_argument("--zip_path", default=config.data_config().zip_path)
    parser.add_argument("--batch_size", type=int, default=128, help="global batch")
    parser.add_argument("--max_len", type=int, default=32, help="max_src_len = max_tgt_len")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--no_train_step", action="store_true", help="skip the step column")
    args = parser.parse_args()
    tfds.disable_progress_bar()

    base = config.data_config()
    base.update(
        data_dir=args.data_dir,
        zip_path=args.zip_path,
        batch_size=args.batch_size,
        max_src_len=args.max_len,
        max_tgt_len=args.max_len,
    )
    built_before = datasets.fra_eng_builder(base).is_prepared()
    start = time.perf_counter()
    builder = datasets.prepared_builder(base)  # builds on first use
    what = "reused" if built_before else "built (array_record, TFDS)"
    print(f"dataset {what} in {time.perf_counter() - start:.1f} s: {builder.data_path}")
    print(f"split sizes: {builder.info.metadata['split_sizes']}")
    print(f"build report: {builder.info.metadata['read_report']}")
    num_devices = jax.local_device_count()
    header = (
        f"{'tokenizer':<14}{'bucketing':<10}{'setup s':>8}{'examples/s':>12}{'tokens/s':>12}"
        f"{'padding':>9}   train step consumption (examples/s)"
    )
    print(header)
    print("-" * len(header))
    for tokenizer in ("word", "sentencepiece"):
        for bucketed in (False, True):
            cfg = base.copy_and_resolve_references()
            cfg.update(tokenizer=tokenizer, bucketing=bucketed)
            start = time.perf_counter()
            pipe = create_input_pipeline(cfg, row_multiple=num_devices)
            setup = time.perf_counter() - start
            padding = bucketing.padding_fraction(pipe.train_iter.epoch_batches(0))
            examples, tokens = pipeline_rate(pipe.train_iter, args.seconds)
            consumption = "skipped" if args.no_train_step else step_rate(cfg, pipe, args.seconds)
            print(
                f"{tokenizer:<14}{'on' if bucketed else 'off':<10}{setup:>8.1f}"
                f"{examples:>12,.0f}{tokens:>12,.0f}{padding:>9.1%}   {consumption}",
                flush=True,
            )
    print(f"global batch {args.batch_size}, {num_devices} local device(s), numpy {np.__version__}")


if __name__ == "__main__":
    main()
