r"""Train-step speed in turns, one process: ours, Flax WMT, torch eager and torch.compile.

    python -m benchmarks.accelerator.speed_worker --size=base --flax_wmt_dir=.flax_wmt \
        --impls="ours (custom_vjp),ours (autodiff),flax wmt,torch eager,torch.compile" \
        --peak_size=8192 --time_limit_s=150 --out=/tmp/speed.json

Every implementation gets the same host batches (`sizes.Size.batch`) and runs one Adam
step per call, synchronised (JAX: `block_until_ready`; torch: `loss.item()`). Each is
built and called once (its compile, or torch's first step), then `--warmup` more times;
then they are timed in turns, one step each, round after round (A B C A B C ...), so the
drift of a shared machine falls on all alike; the median step is reported.

A synchronised step also times the host's dispatch, which a training loop overlaps with
the device's previous step (ours fetches metrics only at log steps). With --pipeline=K
(default 4) a second set of rounds launches K steps of each in a row and waits once, the
way a training loop runs: "pipelined_step_ms" is that wall time over K (median of
rounds), with its tokens/s and MFU beside the synchronised ones. torch's batches are
placed on the GPU beforehand (`torch_reference.to_device`): its step's own host-to-device
copies would wait for the device.

  ours (custom_vjp|autodiff): `training.build` of the size's run config with `gradients` set,
    as a run of that config trains (benchmarks/train_step.py's path); more run-config keys
    after a "+": "ours (autodiff+parallelism=shard_map)" (`sizes.with_gradients`).
  flax wmt: their `models.Transformer` of the same sizes, our step (`flax_wmt.TrainStep`).
  torch eager / torch.compile: `benchmarks.torch_reference` on CUDA when there is one,
    bfloat16 under `torch.autocast` for a bfloat16 size, fused Adam.

tokens/s counts non-pad source + target tokens; MFU = model FLOPs per step / step time /
the matmul peak of the size's dtype measured here (a jitted `jnp.dot` of --peak_size², best
of 5). The FLOPs are one analytic count for all (`common.train_flops`: 6 x the matmul
parameters x the positions, plus the attention terms; every padded position counted);
XLA's `cost_analysis` of our lowered step is reported beside it as a cross-check.
An implementation that fails to build or run is reported as such and the others go on.
Each may compile until 3/4 of --time_limit_s (then it is cut off, SIGALRM, and the rest
skipped), so the timing in turns still has its time; results are written after each
compile and each round, so a job cut off from outside still leaves what it measured.

With --trace_dir, the first of ours timed is then traced for --trace_steps more steps
(`jax.profiler`, no compile: its program is already built), and the report gets
`benchmarks.profile_step`'s table of where a step's device time goes ("profile"), with the
Perfetto trace copied to --trace_copy: on a GPU, the kernels behind the MFU row. The
torch.compile step (torch eager's without it) is then profiled the same way (`torch.profiler`,
"profile_torch"). Both are summed by `kernel_groups`: matmul, fused attention and other
kernels, and the MFU the step's matmul kernels alone would allow.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import common
from benchmarks.accelerator import flax_wmt, jobs, kernel_groups, sizes
from transformer_jax.runtime import configure_process
from transformer_jax.training.config import validate_config

IMPLS = ("ours (custom_vjp)", "ours (autodiff)", "flax wmt", "torch eager", "torch.compile")
NUM_BATCHES = 4  # distinct host batches, cycled


@dataclasses.dataclass
class Impl:
    launch: Callable[[], None]  # one optimizer step, not waited for
    wait: Callable[[], None]  # until every launched step has ended on the device
    tokens: float  # mean non-pad source + target tokens per call
    lower: Callable[[], jax.stages.Lowered] | None = None  # ours: the step, lowered

    def call(self) -> None:
        """One synchronised step."""
        self.launch()
        self.wait()


class NotMeasured(Exception):
    """An implementation that cannot run here; the message is "not measured: why"."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raises TimeoutError in this (main) thread after `seconds` (SIGALRM): a torch.compile
    that hangs is cut off; a compile inside XLA's C++ is cut when it returns."""

    def expire(signum, frame):
        raise TimeoutError(f"did not finish within {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def make_ours(size: sizes.Size, gradients: str) -> Impl:
    size = sizes.with_gradients(size, gradients)
    built = common.build_setting(size.config, size.setting)
    parallel = built.parallel
    batches = [size.batch(seed=i) for i in range(NUM_BATCHES)]
    box = {"state": parallel.put_replicated(built.init_state()), "i": 0}

    def launch() -> None:
        batch = parallel.put_batch(batches[box["i"] % NUM_BATCHES])
        box["state"], box["metrics"] = built.train_step(box["state"], batch)
        box["i"] += 1

    def lower() -> jax.stages.Lowered:
        return built.train_step.lower(box["state"], parallel.put_batch(batches[0]))

    wait = lambda: jax.block_until_ready(box["metrics"])  # noqa: E731
    return Impl(launch, wait, _mean_tokens(batches), lower)


def make_flax(size: sizes.Size, directory: str) -> Impl:
    why_not = flax_wmt.missing(directory)
    if why_not:
        raise NotMeasured(why_not)
    models = flax_wmt.load_models(directory)
    built = common.build_setting(size.config, size.setting)
    wmt = flax_wmt.TrainStep(
        models, flax_wmt.transformer_config(models, built.model_config, size.vocab)
    )
    host = [size.batch(seed=i) for i in range(NUM_BATCHES)]
    batches = [flax_wmt.wmt_batch(b) for b in host]
    box = {"state": wmt.init(seed=0, batch=batches[0]), "i": 0}

    def launch() -> None:
        box["state"], box["loss"] = wmt.step(box["state"], batches[box["i"] % NUM_BATCHES])
        box["i"] += 1

    wait = lambda: jax.block_until_ready(box["loss"])  # noqa: E731
    return Impl(launch, wait, _mean_tokens(host))


def torch_probe() -> str | None:
    """Why torch cannot run beside JAX here ("not measured: ..."), or None. Tried in a child
    process first: two CUDA stacks in one process might crash it, and a crash there costs
    nothing measured here."""
    if importlib.util.find_spec("torch") is None:
        return "not measured: torch not installed"
    code = (
        "import jax, torch; jax.numpy.ones(2).block_until_ready(); "
        "d = 'cuda' if torch.cuda.is_available() else 'cpu'; print(torch.ones(2, device=d).sum())"
    )
    try:
        child = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            env={**os.environ, "PYTHONIOENCODING": "utf-8"},
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "not measured: torch beside jax did not start within 300 s in a child"
    if child.returncode:
        last = (child.stderr.strip().splitlines() or ["?"])[-1]
        return f"not measured: torch beside jax failed in a child (exit {child.returncode}): {last}"
    return None


def make_torch(size: sizes.Size, compile: bool) -> Impl:
    import torch

    from benchmarks import torch_reference

    if size.packed:
        raise NotMeasured("not measured: torch_reference takes padded batches, not packed rows")
    cuda = torch.cuda.is_available()
    step, _ = torch_reference.make_train_step(
        size.setting,
        compile=compile,
        bf16=size.config.model.dtype == "bfloat16",
        device="cuda" if cuda else "cpu",
        fused=cuda,
    )
    host = [size.batch(seed=i) for i in range(NUM_BATCHES)]
    device = "cuda" if cuda else "cpu"
    batches = [torch_reference.to_device(b, device) for b in host]
    box = {"i": 0}

    def launch() -> None:
        step(batches[box["i"] % NUM_BATCHES], sync=False)
        box["i"] += 1

    wait = torch.cuda.synchronize if cuda else (lambda: None)  # a CPU step is synchronous
    return Impl(launch, wait, _mean_tokens(host))


def _mean_tokens(batches: list[dict[str, np.ndarray]]) -> float:
    return float(np.mean([common.non_pad_tokens(b) for b in batches]))


def _make(name: str, size: sizes.Size, flax_dir: str, torch_why_not: str | None) -> Impl:
    if name.startswith("ours ("):
        return make_ours(size, name[len("ours (") : -1])
    if name == "flax wmt":
        return make_flax(size, flax_dir)
    if name in ("torch eager", "torch.compile"):
        if torch_why_not:
            raise NotMeasured(torch_why_not)
        return make_torch(size, compile=name == "torch.compile")
    raise ValueError(f"unknown implementation {name!r}; choose from {IMPLS}")


def _error(error: BaseException) -> str:
    if isinstance(error, NotMeasured):
        return str(error)
    if isinstance(error, TimeoutError):  # time_limit's alarm, raised wherever the step was
        return f"not measured: its build or first call was cut off ({error})"
    # The exception's own line: JAX (traceback filtering) and PEP 678 notes come after it.
    line = f"{type(error).__name__}: {error}"
    return f"not measured: failed, {' '.join(line.split())[:300]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="base", help="A sizes.get name.")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--flax_wmt_dir", default="")
    parser.add_argument("--rounds", type=int, default=20, help="Timed steps of each, in turns.")
    parser.add_argument("--warmup", type=int, default=2, help="Untimed calls after the first.")
    parser.add_argument(
        "--pipeline", type=int, default=4, help="K: steps a round launched before one wait."
    )
    parser.add_argument("--peak_size", type=int, default=8192, help="0: no peak, no MFU.")
    parser.add_argument("--time_limit_s", type=float, default=150.0)
    parser.add_argument("--trace_dir", default="", help="Trace ours here after the rounds.")
    parser.add_argument("--trace_steps", type=int, default=2)
    parser.add_argument("--trace_copy", default="", help="Where the Perfetto trace goes.")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    start = time.perf_counter()
    elapsed = lambda: time.perf_counter() - start  # noqa: E731
    size = sizes.get(args.size)
    configure_process(size.config)  # before the backend starts
    validate_config(size.config, num_devices=jax.local_device_count())
    setting = size.setting
    flops = common.train_flops(setting)
    results: dict = {
        "size": size.describe(),
        "padded_tokens_per_side": setting.batch * setting.length,
        "flops_per_step": flops,
        "flops_note": "analytic, common.train_flops: 3 x forward matmul FLOPs of every padded "
        "position (6 x matmul params x tokens + attention), the same count for every impl",
        "impls": {},
    }
    dtype = jnp.bfloat16 if size.config.model.dtype == "bfloat16" else jnp.float32
    if args.peak_size:
        peak = common.matmul_peak(args.peak_size, repeats=5, dtype=dtype)
        results["peak_flops"] = peak
        results["peak_note"] = f"jnp.dot {jnp.dtype(dtype).name} {args.peak_size}^2, best of 5"
    jobs.write_partial(args.out, results)

    # ------------------------------------------------------------ build, compile, warm up
    names = [n.strip() for n in args.impls.split(",") if n.strip()]
    torch_why_not = torch_probe() if any(n.startswith("torch") for n in names) else None
    impls: dict[str, Impl] = {}
    for name in names:
        # Each may take until 3/4 of the job's time; then the rest are skipped.
        budget = 0.75 * args.time_limit_s - elapsed()
        if budget < 0.15 * args.time_limit_s:
            results["impls"][name] = (
                f"not measured: skipped, {elapsed():.0f} s of the job's {args.time_limit_s:.0f} "
                "s gone before its compile"
            )
            continue
        results["impls"][name] = "not measured: its build or first call was cut off"
        jobs.write_partial(args.out, results)
        try:
            with time_limit(budget):
                t0 = time.perf_counter()
                impl = _make(name, size, args.flax_wmt_dir, torch_why_not)
                if impl.lower and "flops_xla_ours" not in results:
                    cost = impl.lower().cost_analysis()  # before the first call donates
                    results["flops_xla_ours"] = float(cost["flops"]) if cost else None
                t1 = time.perf_counter()
                impl.call()  # compiles
                first = time.perf_counter() - t1
                for _ in range(args.warmup):
                    impl.call()
        except Exception as error:  # noqa: BLE001 (one implementation failing is a result)
            results["impls"][name] = _error(error)
        else:
            impls[name] = impl
            results["impls"][name] = {"build_s": round(t1 - t0, 2), "first_call_s": round(first, 2)}
        jobs.write_partial(args.out, results)

    # ------------------------------------------------------------ timed in turns
    time_in_turns(impls, results, args, flops, elapsed, steps=1, stop_at=0.9)
    if args.pipeline > 0:  # then as a training loop runs them
        time_in_turns(impls, results, args, flops, elapsed, steps=args.pipeline, stop_at=0.95)
    ours = [name for name in impls if name.startswith("ours (")]
    peak = results.get("peak_flops")
    if args.trace_dir and ours:
        results["profile"] = "not measured: the trace was cut off"
        jobs.write_partial(args.out, results)
        results["profile"] = profile(impls[ours[0]], ours[0], args, flops, peak)
        jobs.write_partial(args.out, results)
    peers = [name for name in ("torch.compile", "torch eager") if name in impls]
    if args.trace_dir and peers:  # torch.compile's kernels (eager's without it)
        results["profile_torch"] = "not measured: the torch profile was cut off"
        jobs.write_partial(args.out, results)
        results["profile_torch"] = profile_torch(impls[peers[0]], peers[0], args, flops, peak)
        jobs.write_partial(args.out, results)
    print(f"speed_worker: done in {elapsed():.0f} s", flush=True)


def time_in_turns(
    impls: dict[str, Impl],
    results: dict,
    args: argparse.Namespace,
    flops: float,
    elapsed: Callable[[], float],
    *,
    steps: int,
    stop_at: float,
) -> None:
    """--rounds rounds in turns (fewer once `stop_at` of the job's time is gone, at least
    3), each implementation launching `steps` steps and waiting once: 1 = synchronised
    steps ("step_ms", "tokens_per_s", "mfu", "rounds" in each entry), more = pipelined
    (the same keys with "pipelined_", and "pipeline": `steps`). Written after every round,
    so a job cut off keeps them."""
    prefix = "pipelined_" if steps > 1 else ""
    times: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(args.rounds):
        if times and elapsed() > stop_at * args.time_limit_s and min(map(len, times.values())) >= 3:
            break
        for name, impl in impls.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                impl.launch()
            impl.wait()
            times[name].append((time.perf_counter() - t0) / steps)
        for name, impl in impls.items():
            step_s = statistics.median(times[name])
            entry = results["impls"][name]
            entry[f"{prefix}rounds"] = len(times[name])
            entry[f"{prefix}step_ms"] = 1e3 * step_s
            entry[f"{prefix}tokens_per_s"] = impl.tokens / step_s
            if "peak_flops" in results:
                entry[f"{prefix}mfu"] = flops / step_s / results["peak_flops"]
            if steps > 1:
                entry["pipeline"] = steps
        jobs.write_partial(args.out, results)


def profile(
    impl: Impl, name: str, args: argparse.Namespace, flops: float, peak: float | None
) -> dict | str:
    """`benchmarks.profile_step`'s op table of `--trace_steps` traced calls of `impl`, in
    `kernel_groups`' summary (matmul time, the MFU the matmuls alone allow)."""
    from benchmarks import profile_step

    trace_dir = Path(args.trace_dir)
    try:
        with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
            for _ in range(args.trace_steps):
                impl.call()
        rows = profile_step.op_table(trace_dir, args.trace_steps)
    except Exception as error:  # noqa: BLE001 (a profiler missing here is a result)
        return _error(error)
    if args.trace_copy:
        newest = max(trace_dir.rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
        shutil.copyfile(newest, args.trace_copy)
    matmuls, note = frozenset(), "kernel names only"
    if impl.lower:  # the step's optimised HLO, from the compile cache: no new compile
        t0 = time.perf_counter()
        try:
            matmuls = kernel_groups.matmul_fusions(impl.lower().compile().as_text())
            note = (
                f"names + the HLO's {len(matmuls)} dot fusions ({time.perf_counter() - t0:.1f} s)"
            )
        except Exception as error:  # noqa: BLE001 (the summary by name still stands)
            note = f"kernel names only: the HLO was not read ({_error(error)})"
    summary = kernel_groups.summary(rows, flops=flops, peak=peak, matmul_names=matmuls)
    return {
        "impl": name,
        **summary,
        "matmuls_from": note,
        "trace": args.trace_copy or str(trace_dir),
    }


def profile_torch(
    impl: Impl, name: str, args: argparse.Namespace, flops: float, peak: float | None
) -> dict | str:
    """The same summary for a torch implementation, from `torch.profiler`'s kernels."""
    try:
        rows = kernel_groups.torch_rows(impl.call, args.trace_steps)
    except Exception as error:  # noqa: BLE001 (a profiler missing here is a result)
        return _error(error)
    return {"impl": name, **kernel_groups.summary(rows, flops=flops, peak=peak)}


if __name__ == "__main__":
    main()
