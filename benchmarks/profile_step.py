r"""Profile one training step: a `jax.profiler` trace plus a table of where the time goes.

    python -m benchmarks.profile_step --settings=small --dtype=bfloat16
    python -m benchmarks.profile_step --settings=d2l --trace_dir=/tmp/trace --top=40

Runs a few warm-up steps of the `benchmarks.train_step` setting, then traces `--steps`
steps with `jax.profiler.trace(..., create_perfetto_trace=True)`. Open the
`*.perfetto-trace` / `perfetto_trace.json.gz` file under `--trace_dir` in
https://ui.perfetto.dev (or TensorBoard's profile plugin for the `.xplane.pb`). The
printed table sums the XLA:CPU thunk events per kind of op ("ynn_fusion" = a matmul run
by YNNPACK, "copy_bitcast_fusion" = a transpose, "while" = a loop), per step. On a
multi-core CPU two thunks may run at once, so the column can add up to more than the step.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gzip
import json
import re
import time
from pathlib import Path

import jax
import numpy as np

from benchmarks import common
from benchmarks.train_step import jax_model_config
from transformer_jax import runtime
from transformer_jax.runtime import host_memory
from transformer_jax.training.config import training_defaults
from transformer_jax.training.optimizer import make_optimizer
from transformer_jax.training.parallel import DataParallel
from transformer_jax.training.state import create_train_state
from transformer_jax.training.step import step_kwargs, train_step

# Host-side and executor bookkeeping events, not XLA ops.
_NOT_OPS = ("$", "Thunk", "Slinky", "Pjit", "PmapFunction", "CommonPjRt", "end: ")


def op_table(trace_dir: Path, steps: int) -> list[tuple[str, float, int]]:
    """(op kind, ms per step, calls per step) from the newest perfetto trace, largest first.

    The newest: `jax.profiler.trace` adds a run directory per call, so a reused
    `--trace_dir` holds earlier runs' traces too.
    """
    path = max(trace_dir.rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    total: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and not e["name"].startswith(_NOT_OPS):
            kind = re.sub(r"\.\d+$", "", e["name"])
            total[kind] += e.get("dur", 0)
            calls[kind] += 1
    return [(k, us / steps / 1e3, calls[k] // steps) for k, us in total.most_common()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default="small", choices=sorted(common.SETTINGS))
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=2, help="traced steps")
    parser.add_argument("--trace_dir", default="/tmp/transformer_jax_trace")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--host_memory", default="reuse", choices=host_memory.MODES)
    args = parser.parse_args()
    process = training_defaults()  # the run config's process settings, from the flags
    process.host_memory = args.host_memory
    runtime.configure_process(process)  # before the first computation

    s = common.SETTINGS[args.settings]
    model_config = jax_model_config(s, args.dtype).replace(
        dropout_rate=args.dropout, attention_dropout_rate=args.dropout
    )
    config = training_defaults()
    config.schedule, config.learning_rate = "constant", 1e-4
    tx, schedule = make_optimizer(config, s.model_dim)
    parallel = DataParallel.create("pmap")
    step = parallel.map_train_step(
        functools.partial(train_step, **step_kwargs(config, model_config, tx, schedule))
    )
    state = parallel.put_replicated(create_train_state(model_config, tx, seed=0))
    n_dev = jax.local_device_count()
    batch = {k: v.reshape((n_dev, -1) + v.shape[1:]) for k, v in common.padded_batch(s, 0).items()}
    batch = parallel.put_batch(batch)

    start = time.perf_counter()
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    print(f"compile + first step: {time.perf_counter() - start:.1f} s")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        state, metrics = step(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    print(f"step (untraced, median of 3): {1e3 * np.median(times):.1f} ms")

    trace_dir = Path(args.trace_dir)
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        for _ in range(args.steps):
            state, metrics = step(state, batch)
            jax.block_until_ready(metrics)
    rows = op_table(trace_dir, args.steps)
    print(f"trace: {trace_dir} | op time per step {sum(r[1] for r in rows):.1f} ms")
    print("| op kind | ms / step | calls / step |\n|---|---|---|")
    for kind, ms, n in rows[: args.top]:
        print(f"| {kind} | {ms:.1f} | {n} |")


if __name__ == "__main__":
    main()
