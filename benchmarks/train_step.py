r"""Training-step speed: transformer_jax vs torch.nn.Transformer on identical padded batches.

    python -m benchmarks.train_step                       # d2l, small, base
    python -m benchmarks.train_step --settings=small --steps=30 --torch_compile

For each setting: non-pad source+target tokens/second (median, min, max over --steps timed
steps after warm-up), compile time (first call), and MFU = model FLOPs per step
(`benchmarks.common.train_flops`, formula in its docstring) / step time / the float32
matmul peak measured in the same run. Each JAX call runs `--steps_per_call` optimizer
steps (a `lax.scan` over a stack of batches) when the training library supports it.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import numpy as np

from benchmarks import common
from transformer_jax.nn import ModelConfig
from transformer_jax.training.config import training_defaults
from transformer_jax.training.optimizer import make_optimizer
from transformer_jax.training.parallel import DataParallel
from transformer_jax.training.state import create_train_state
from transformer_jax.training.step import step_kwargs, train_step, train_steps


def jax_model_config(s: common.Setting, dtype: str = "float32") -> ModelConfig:
    return ModelConfig(
        src_vocab_size=s.vocab,
        tgt_vocab_size=s.vocab,
        num_encoder_layers=s.layers,
        num_decoder_layers=s.layers,
        model_dim=s.model_dim,
        num_heads=s.num_heads,
        ffn_dim=s.ffn_dim,
        dropout_rate=0.1,
        attention_dropout_rate=0.1,
        dtype=dtype,
    )


def bench_jax(s: common.Setting, args: argparse.Namespace) -> dict[str, float]:
    model_config = jax_model_config(s, args.dtype)
    config = training_defaults()
    config.label_smoothing = 0.0
    config.schedule, config.learning_rate = "constant", 1e-4
    tx, schedule = make_optimizer(config, s.model_dim)
    parallel = DataParallel.create("pmap")
    kwargs = step_kwargs(config, model_config, tx, schedule)
    n = args.steps_per_call
    if n == 1:
        one = parallel.map_train_step(functools.partial(train_step, **kwargs))
        step = lambda state, b: one(state, parallel.put_batch(b))  # noqa: E731
    else:
        many = parallel.map_train_steps(functools.partial(train_steps, **kwargs))
        step = lambda state, b: many(state, parallel.put_batches([b] * n))  # noqa: E731
    state = parallel.put_replicated(create_train_state(model_config, tx, seed=0))
    # The same global batch as torch, split over the local devices (B / n_dev rows each).
    n_dev = jax.local_device_count()
    if s.batch % n_dev:
        raise ValueError(f"batch {s.batch} of {s.name!r} does not split over {n_dev} devices.")
    global_batches = [common.padded_batch(s, seed=i) for i in range(4)]
    batches = [
        {k: v.reshape((n_dev, -1) + v.shape[1:]) for k, v in b.items()} for b in global_batches
    ]
    box = {"state": state, "i": 0}

    def call():
        box["state"], metrics = step(box["state"], batches[box["i"] % len(batches)])
        box["i"] += 1
        jax.block_until_ready(metrics)

    first, times = common.time_calls(call, args.warmup, args.steps)
    # Batches differ in padding; report tokens of the batches actually timed.
    mean_tokens = np.mean([common.non_pad_tokens(b) for b in global_batches])
    out = common.summary(mean_tokens * n, times)
    out["step_s"] /= n  # per optimizer step
    out["compile_s"] = first
    return out


def bench_torch(s: common.Setting, compile: bool, args: argparse.Namespace) -> dict[str, float]:
    from benchmarks import torch_reference

    step, _ = torch_reference.make_train_step(s, compile=compile)
    batches = [common.padded_batch(s, seed=i) for i in range(4)]
    box = {"i": 0}

    def call():
        step(batches[box["i"] % len(batches)])
        box["i"] += 1

    first, times = common.time_calls(call, args.warmup, args.steps)
    out = common.summary(np.mean([common.non_pad_tokens(b) for b in batches]), times)
    out["compile_s"] = first
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default="d2l,small,base")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--steps_per_call", type=int, default=1, help="lax.scan steps per call")
    parser.add_argument("--no_torch", action="store_true")
    parser.add_argument("--torch_compile", action="store_true")
    args = parser.parse_args()

    peak = common.matmul_peak()
    print(
        f"devices: {jax.devices()} | float32 matmul peak {peak / 1e9:.0f} GFLOP/s | "
        f"dtype {args.dtype} | steps per call {args.steps_per_call}"
    )
    try:
        import torch

        have_torch = not args.no_torch
        torch_version = torch.__version__
    except ImportError:
        have_torch, torch_version = False, "not installed"
    print(f"torch: {torch_version}")
    header = (
        "| setting | impl | tok/s median | min | max | step ms | compile s | MFU |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for name in args.settings.split(","):
        s = common.SETTINGS[name]
        flops = common.train_flops(s)
        results = {"transformer_jax": bench_jax(s, args)}
        if have_torch:
            results["torch eager"] = bench_torch(s, False, args)
            if args.torch_compile:
                results["torch.compile"] = bench_torch(s, True, args)
        for impl, r in results.items():
            mfu = flops / r["step_s"] / peak
            rows.append(
                f"| {name} | {impl} | {r['median']:,.0f} | {r['min']:,.0f} | "
                f"{r['max']:,.0f} | {1e3 * r['step_s']:.1f} | {r['compile_s']:.1f} | "
                f"{100 * mfu:.0f}% |"
            )
        if have_torch:
            ratio = results["transformer_jax"]["median"] / results["torch eager"]["median"]
            rows.append(f"| {name} | ratio jax / torch eager | {ratio:.2f}× | | | | | |")
        print(header + "\n" + "\n".join(rows), flush=True)
    print(time.strftime("measured %Y-%m-%d %H:%M"))


if __name__ == "__main__":
    main()
