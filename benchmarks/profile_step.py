r"""Profile one training step: a `jax.profiler` trace plus a table of where the time goes.

    python -m benchmarks.profile_step --config=configs/benchmark.py:small \
        --config.model.dtype=bfloat16
    python -m benchmarks.profile_step --config=configs/benchmark.py:d2l --trace_dir=/tmp/trace

Runs a few warm-up steps of a `configs/benchmark.py` setting (built by `training.build`,
any run-config key overridable, e.g. `--config.model.dropout_rate=0`), then traces `--steps`
steps with `jax.profiler.trace(..., create_perfetto_trace=True)`. Open the
`*.perfetto-trace` / `perfetto_trace.json.gz` file under `--trace_dir` in
https://ui.perfetto.dev (or TensorBoard's profile plugin for the `.xplane.pb`). The
printed table sums the XLA:CPU thunk events per kind of op ("ynn_fusion" = a matmul run
by YNNPACK, "copy_bitcast_fusion" = a transpose, "while" = a loop), per step. On a
multi-core CPU two thunks may run at once, so the column can add up to more than the step.
On a GPU or TPU the trace has a device process ("/device:GPU:0"); then only its events
count: its "XLA Ops" line (one event per HLO op) where there is one, else its streams'
kernels (`device_events`); host events would count the same work twice.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import time
from pathlib import Path

import jax
import numpy as np
from absl import app, flags

from benchmarks import common

FLAGS = flags.FLAGS
common.define_config_flag()
flags.DEFINE_integer("steps", 2, "Traced steps.")
flags.DEFINE_string("trace_dir", "/tmp/transformer_jax_trace", "Where the trace is written.")
flags.DEFINE_integer("top", 25, "Rows of the op table.")

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
    device = device_events(events)
    if device is None:  # XLA:CPU: the host's thunk events
        device = [e for e in events if e.get("ph") == "X" and not e["name"].startswith(_NOT_OPS)]
    total: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for e in device:
        kind = re.sub(r"\.\d+$", "", e["name"])
        total[kind] += e.get("dur", 0)
        calls[kind] += 1
    return [(k, us / steps / 1e3, calls[k] // steps) for k, us in total.most_common()]


def device_events(events: list[dict]) -> list[dict] | None:
    """The complete ("X") events of the trace's accelerator processes ("/device:..."): their
    "XLA Ops" threads if they have any, else every thread but the whole-program lines ("XLA
    Modules", "Steps"). None when the trace has no device process (XLA:CPU)."""
    processes, threads = {}, {}
    for e in events:
        name = e.get("args", {}).get("name", "") if e.get("ph") == "M" else None
        if e.get("name") == "process_name" and name is not None:
            processes[e.get("pid")] = name
        elif e.get("name") == "thread_name" and name is not None:
            threads[(e.get("pid"), e.get("tid"))] = name
    pids = {pid for pid, name in processes.items() if name.startswith("/device:")}
    if not pids:
        return None
    spans = [e for e in events if e.get("ph") == "X" and e.get("pid") in pids]
    ops = [e for e in spans if threads.get((e["pid"], e.get("tid"))) == "XLA Ops"]
    if ops:
        return ops
    whole = ("XLA Modules", "Steps")
    return [e for e in spans if threads.get((e["pid"], e.get("tid"))) not in whole]


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    config, s = common.config_from_flags()  # applies the process settings first
    built = common.build_setting(config, s)
    step, parallel = built.train_step, built.parallel
    state = parallel.put_replicated(built.init_state())
    batch = parallel.put_batch(common.padded_batch(s, 0))

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

    trace_dir = Path(FLAGS.trace_dir)
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        for _ in range(FLAGS.steps):
            state, metrics = step(state, batch)
            jax.block_until_ready(metrics)
    rows = op_table(trace_dir, FLAGS.steps)
    print(f"trace: {trace_dir} | op time per step {sum(r[1] for r in rows):.1f} ms")
    print("| op kind | ms / step | calls / step |\n|---|---|---|")
    for kind, ms, n in rows[: FLAGS.top]:
        print(f"| {kind} | {ms:.1f} | {n} |")


if __name__ == "__main__":
    common.run(main)
