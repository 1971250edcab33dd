r"""Init and train-step compile seconds of our model beside Flax WMT's of the same size.

    python -m benchmarks.accelerator.compile_worker --sizes=readme --flax_wmt_dir=.flax_wmt \
        --out=/tmp/compile.json

One process, one batch shape per size (the run's own: the README run's packed rows of 64),
the same instrument for both sides: `runtime.compile_log` sums every program's tracing,
lowering and backend compile by kind ("init", "train step"), as the train launcher reports
them. Run it without the persistent compilation cache (`accelerator_check` sets
JAX_ENABLE_COMPILATION_CACHE=false), so each number is a compile, not a cache read. A small
computation first starts the backend, so neither side pays for that. Ours compiles first,
then theirs; results are written after each step, so a cut-off run leaves what it measured.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from benchmarks import common
from benchmarks.accelerator import flax_wmt, jobs, sizes
from transformer_jax.runtime import compile_log, configure_process
from transformer_jax.training.config import validate_config


def _timed(log_kind: str, fn):
    """(fn()'s value, its wall seconds, the programs it compiled)."""
    with compile_log.recording() as log, compile_log.kind(log_kind):
        start = time.perf_counter()
        value = fn()
        jax.block_until_ready(value)
        wall = time.perf_counter() - start
    return value, wall, log


def _entry(log: compile_log.CompileLog, wall: float) -> dict:
    return {
        "compile_s": round(log.seconds, 3),
        "first_call_s": round(wall, 3),
        "programs": len(log.programs),
        "cached": log.num_cached,
    }


def ours(size: sizes.Size) -> dict:
    """Our init (parameters, optimizer state, the replicated copy) and first train step."""
    built = common.build_setting(size.config, size.setting)
    parallel = built.parallel
    state, init_wall, init_log = _timed("init", lambda: parallel.put_replicated(built.init_state()))
    batch = parallel.put_batch(size.batch(seed=0))
    _, step_wall, step_log = _timed("train step", lambda: built.train_step(state, batch))
    return {"init": _entry(init_log, init_wall), "train step": _entry(step_log, step_wall)}


def theirs(size: sizes.Size, directory: str) -> dict:
    """Flax WMT's `jax.jit(model.init)` (+ Adam's init) and first train step, same sizes."""
    models = flax_wmt.load_models(directory)
    built = common.build_setting(size.config, size.setting)  # builds nothing on a device
    cfg = flax_wmt.transformer_config(models, built.model_config, size.vocab)
    wmt = flax_wmt.TrainStep(models, cfg)
    batch = flax_wmt.wmt_batch(size.batch(seed=0))
    state, init_wall, init_log = _timed("init", lambda: wmt.init(seed=0, batch=batch))
    _, step_wall, step_log = _timed("train step", lambda: wmt.step(state, batch))
    return {"init": _entry(init_log, init_wall), "train step": _entry(step_log, step_wall)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="readme", help="Comma-separated sizes.get names.")
    parser.add_argument("--flax_wmt_dir", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    names = [n for n in args.sizes.split(",") if n]
    configure_process(sizes.get(names[0]).config)  # before the backend starts
    jax.block_until_ready(jax.jit(lambda x: x @ x)(jnp.ones((8, 8))))  # the backend, started
    results: dict = {"device": str(jax.devices()[0].device_kind), "sizes": {}}
    why_not = flax_wmt.missing(args.flax_wmt_dir)
    cut = "not measured: cut off before its compile ended"
    for name in names:
        size = sizes.get(name)
        validate_config(size.config, num_devices=jax.local_device_count())
        entry = results["sizes"][name] = {"size": size.describe(), "ours": cut, "flax_wmt": cut}
        jobs.write_partial(args.out, results)
        entry["ours"] = ours(size)
        jobs.write_partial(args.out, results)
        entry["flax_wmt"] = why_not or theirs(size, args.flax_wmt_dir)
        jobs.write_partial(args.out, results)
    print("compile_worker: done", flush=True)


if __name__ == "__main__":
    main()
