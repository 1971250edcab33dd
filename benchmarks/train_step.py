r"""Training-step speed: transformer_jax vs torch.nn.Transformer on identical padded batches.

    python -m benchmarks.train_step --config=configs/benchmark.py:small
    python -m benchmarks.train_step --config=configs/benchmark.py:base --steps=30 --torch_compile
    for s in d2l small base; do
        python -m benchmarks.train_step --config=configs/benchmark.py:$s; done

The size (model, sequence length L, batch B, vocabulary V) is a run config of
`configs/benchmark.py`, built by `training.build` as a training run builds it. For that
setting: non-pad source+target tokens/second (median, min, max over --steps timed steps
after warm-up), compile time (first call), and MFU = model FLOPs per step
(`benchmarks.common.train_flops`, formula in its docstring) / step time / the float32
matmul peak measured in the same run. The implementations are timed in turns (one step
each, round after round), so a drifting machine does not skew the ratio. Run-config keys
change the JAX side as they change a run: each call runs `--config.steps_per_call`
optimizer steps (a `lax.scan` over a stack of batches); `--config.model.dtype=bfloat16`
runs both sides in mixed precision (torch under `torch.autocast("cpu", torch.bfloat16)`);
`--config.parallelism=shard_map`; `--config.xla_flags=...`, `--config.host_memory=system`
and `--config.threefry_lowering=rolled` tune the process (torch, in the same process, runs
with them too). With several local devices the one global batch is split over them
(`DataParallel.put_batch`), so both sides see identical batches.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import jax
import ml_collections
import numpy as np
from absl import app, flags

from benchmarks import common
from transformer_jax.runtime import host_memory

FLAGS = flags.FLAGS
common.define_config_flag()
flags.DEFINE_integer("steps", 20, "Timed calls per implementation.")
flags.DEFINE_integer("warmup", 3, "Untimed calls after the compiling one.")
flags.DEFINE_bool("no_torch", False, "Time transformer_jax alone.")
flags.DEFINE_bool("torch_compile", False, "Also time torch.compile.")


def make_jax(
    config: ml_collections.ConfigDict, s: common.Setting
) -> tuple[Callable[[], None], float, int]:
    """(one call, non-pad tokens per call, optimizer steps per call) of the JAX step."""
    built = common.build_setting(config, s)
    parallel = built.parallel
    n = config.steps_per_call
    if n == 1:
        step = lambda state, b: built.train_step(state, parallel.put_batch(b))  # noqa: E731
    else:
        step = lambda state, b: built.train_steps(state, parallel.put_batches([b] * n))  # noqa: E731
    state = parallel.put_replicated(built.init_state())
    # The same global batches as torch (one process: all B rows); put_batch splits them.
    batches = [common.padded_batch(s, seed=i) for i in range(4)]
    box = {"state": state, "i": 0}

    def call() -> None:
        box["state"], metrics = step(box["state"], batches[box["i"] % len(batches)])
        box["i"] += 1
        jax.block_until_ready(metrics)

    mean_tokens = np.mean([common.non_pad_tokens(b) for b in batches])
    return call, mean_tokens * n, n


def make_torch(
    s: common.Setting, compile: bool, dtype: str
) -> tuple[Callable[[], None], float, int]:
    from benchmarks import torch_reference

    bf16 = dtype == "bfloat16"  # the same policy: torch.autocast bfloat16
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


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    config, s = common.config_from_flags()  # applies the process settings first
    dtype = config.model.dtype

    peak = common.matmul_peak()
    print(
        f"devices: {jax.devices()} | float32 matmul peak {peak / 1e9:.0f} GFLOP/s | "
        f"dtype {dtype} | steps per call {config.steps_per_call} | "
        f"XLA_FLAGS {os.environ.get('XLA_FLAGS', '')!r} | host memory "
        f"{host_memory.in_effect()}"
    )
    try:
        import torch

        have_torch = not FLAGS.no_torch
        torch_version = torch.__version__
    except ImportError:
        have_torch, torch_version = False, "not installed"
    print(f"torch: {torch_version}")
    header = (
        "| setting | impl | tok/s median | min | max | step ms | compile s | MFU |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    rows = []
    flops = common.train_flops(s)
    impls = {"transformer_jax": make_jax(config, s)}
    if have_torch:
        impls["torch eager"] = make_torch(s, False, dtype)
        if FLAGS.torch_compile:
            impls["torch.compile"] = make_torch(s, True, dtype)
    results = run_interleaved(impls, FLAGS.warmup, FLAGS.steps)
    for impl, r in results.items():
        mfu = flops / r["step_s"] / peak
        rows.append(
            f"| {s.name} | {impl} | {r['median']:,.0f} | {r['min']:,.0f} | "
            f"{r['max']:,.0f} | {1e3 * r['step_s']:.1f} | {r['compile_s']:.1f} | "
            f"{100 * mfu:.0f}% |"
        )
    if have_torch:
        ratio = results["transformer_jax"]["median"] / results["torch eager"]["median"]
        rows.append(f"| {s.name} | ratio jax / torch eager | {ratio:.2f}× | | | | | |")
    print(header + "\n" + "\n".join(rows), flush=True)
    print(time.strftime("measured %Y-%m-%d %H:%M"))


if __name__ == "__main__":
    common.run(main)
