r"""Training-step speed: transformer_jax vs torch.nn.Transformer on identical padded batches.

    python -m benchmarks.train_step                       # d2l, small, base
    python -m benchmarks.train_step --settings=small --steps=30 --torch_compile

For each setting: non-pad source+target tokens/second (median, min, max over --steps timed
steps after warm-up), compile time (first call), and MFU = model FLOPs per step
(`benchmarks.common.train_flops`, formula in its docstring) / step time / the float32
matmul peak measured in the same run. The implementations are timed in turns (one step
each, round after round), so a drifting machine does not skew the ratio. Each JAX call
runs `--steps_per_call` optimizer steps (a `lax.scan` over a stack of batches).
`--dtype=bfloat16` runs both sides in mixed precision: the model's bfloat16 compute, and
torch under `torch.autocast("cpu", torch.bfloat16)`. With several local devices the one
global batch is split over them (B / n rows each), so both sides see identical batches.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable

import jax
import numpy as np

from benchmarks import common
from transformer_jax import runtime
from transformer_jax.nn import ModelConfig
from transformer_jax.runtime import host_memory
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


def make_jax(s: common.Setting, args: argparse.Namespace) -> tuple[Callable[[], None], float, int]:
    """(one call, non-pad tokens per call, optimizer steps per call) of the JAX step."""
    model_config = jax_model_config(s, args.dtype)
    config = training_defaults()
    config.label_smoothing = 0.0
    config.schedule, config.learning_rate = "constant", 1e-4
    tx, schedule = make_optimizer(config, s.model_dim)
    parallel = DataParallel.create(args.parallelism)
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

    def call() -> None:
        box["state"], metrics = step(box["state"], batches[box["i"] % len(batches)])
        box["i"] += 1
        jax.block_until_ready(metrics)

    mean_tokens = np.mean([common.non_pad_tokens(b) for b in global_batches])
    return call, mean_tokens * n, n


def make_torch(
    s: common.Setting, compile: bool, args: argparse.Namespace
) -> tuple[Callable[[], None], float, int]:
    from benchmarks import torch_reference

    bf16 = args.dtype == "bfloat16"  # the same policy: torch.autocast bfloat16
    step, _ = torch_reference.make_train_step(s, compile=compile, bf16=bf16)
    batches = [common.padded_batch(s, seed=i) for i in range(4)]
    box = {"i": 0}

    def call() -> None:
        step(batches[box["i"] % len(batches)])
        box["i"] += 1

    return call, float(np.mean([common.non_pad_tokens(b) for b in batches])), 1


def run_interleaved(
    impls: dict[str, tuple[Callable[[], None], float, int]], warmup: int, steps: int
) -> dict[str, dict[str, float]]:
    """Compile/warm each implementation, then time them in turns: A B C A B C ...

    The machine's speed drifts by tens of percent over minutes (a shared VM), so timing
    one implementation after the other would fold that drift into the ratio; in turns,
    every implementation sees the same conditions.
    """
    compile_s = {}
    for name, (call, _, _) in impls.items():
        start = time.perf_counter()
        call()
        compile_s[name] = time.perf_counter() - start
        for _ in range(warmup):
            call()
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(steps):
        for name, (call, _, _) in impls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    out = {}
    for name, (_, tokens, n) in impls.items():
        out[name] = common.summary(tokens, times[name])
        out[name]["step_s"] /= n  # per optimizer step
        out[name]["compile_s"] = compile_s[name]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default="d2l,small,base")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--steps_per_call", type=int, default=1, help="lax.scan steps per call")
    parser.add_argument("--parallelism", default="pmap", choices=["pmap", "shard_map"])
    parser.add_argument("--no_torch", action="store_true")
    parser.add_argument("--torch_compile", action="store_true")
    parser.add_argument(
        "--xla_flags",
        default="",
        help="XLA flags for this process, as a run config's xla_flags (the d2l config's: "
        "--xla_cpu_experimental_ynn_fusion_type=dot,eltwise,reduce)",
    )
    parser.add_argument(
        "--host_memory",
        default="reuse",
        choices=host_memory.MODES,
        help="as a run config's host_memory (transformer_jax/runtime); torch, in the same "
        "process, runs with it too",
    )
    parser.add_argument(
        "--threefry_lowering",
        default="auto",
        choices=runtime.threefry.CHOICES,
        help="as a run config's threefry_lowering (transformer_jax/runtime)",
    )
    args = parser.parse_args()
    process = training_defaults()  # the run config's process settings, from the flags
    process.xla_flags, process.host_memory = args.xla_flags, args.host_memory
    process.threefry_lowering = args.threefry_lowering
    runtime.configure_process(process)  # before the first computation

    peak = common.matmul_peak()
    print(
        f"devices: {jax.devices()} | float32 matmul peak {peak / 1e9:.0f} GFLOP/s | "
        f"dtype {args.dtype} | steps per call {args.steps_per_call} | "
        f"XLA_FLAGS {os.environ.get('XLA_FLAGS', '')!r} | host memory "
        f"{host_memory.in_effect()}"
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
        impls = {"transformer_jax": make_jax(s, args)}
        if have_torch:
            impls["torch eager"] = make_torch(s, False, args)
            if args.torch_compile:
                impls["torch.compile"] = make_torch(s, True, args)
        results = run_interleaved(impls, args.warmup, args.steps)
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
