r"""Issue 38's accelerator check: compile times beside Flax WMT, the README run and the
deep_sampled recipe (the 60-minute one) end to end, train-step speed beside Flax WMT and
PyTorch, and the model tests, on one accelerator, in one table and one JSON report.

    python -m benchmarks.accelerator_check --flax_wmt_dir=.flax_wmt   # <= 8 min, one GPU
    python -m benchmarks.accelerator_check --dry_run                  # every job tiny, CPU
    bash benchmarks/gpu_check.sh      # on the GPU machine: its set-up, then this into $OUT

The jobs, each a subprocess with its own time limit, in this order (most wanted first;
`--jobs` picks some and their order):

  compile        our README model's init and train-step compile seconds beside the same
                 size of Flax `examples/wmt`, one process, no persistent cache
  data           the README run's data built in the default data directory (not part of
                 the run's time: its target assumes the data built)
  readme         the README run from a fresh workdir and a fresh compilation cache
                 (`precompile` "auto": its eval and decoders compiled while it trains)
  readme_cached  the README run again, fresh workdir, the first launch's cache
  readme_inline  (when asked) the README run with `precompile=off`, its own fresh cache:
                 against "readme", whose eval and decoders compile in a background thread
  deep_sampled   that recipe from a fresh workdir and a fresh data directory (data
                 building included), scored with its beam 6 on the whole test split
  speed          `base` in bfloat16, 384 x 64 tokens a side, timed in turns: ours with the
                 backend's gradients, torch eager, torch.compile, ours with the other
                 gradient rule, Flax WMT; tokens/s and MFU against the bfloat16 matmul peak
                 measured in the same process; then ours and torch.compile
                 profiled: their steps by kernel kind, and the MFU their matmul kernels
                 alone would allow (`accelerator/kernel_groups.py`)
  gradients      the README model's step: custom_vjp against autodiff gradients, in turns
  tests          pytest on tests/test_{ops,nn,decoding}_*.py and test_transformations.py
  flags          (when asked) the README step (gradients "auto") compiled and timed in a
                 fresh process under each of FLAG_VARIANTS' XLA:GPU options (autotuning,
                 Triton GEMMs): compile seconds against step time (item 3)

The report's stages: "programs" (every program each run compiled, from its
compile_log.jsonl; the second README launch's compile seconds over the first's; the compile
job), "speed", "end to end" and "tests". A job runs for at most its limit (`--limit
name=seconds` changes one) and never past `--budget_s` (470 s: the check ends within 8
minutes); a job cut off says "timed out after N s" and keeps what it measured (the runs:
steps reached and their rate); a job the budget leaves no time for says "not measured",
and the end of the output names the jobs to run again (`--jobs=...`).
Writes one JSON report (`--out`; default `$OUT/accelerator_check.json` when $OUT is set,
else benchmarks/results/, git-ignored) with the device, date, versions and the command,
the jobs' logs beside it, and prints one table.

`--dry_run` runs every job tiny on the CPU in about two minutes, through the same code:
`configs/fra_eng.py:runlocal` runs of 6 steps on the checkout's data, the tiny model for
the speed job, a 256² matmul for the peak, one test file
(tests/test_benchmark_accelerator_check.py runs it).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import glob
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.accelerator import jobs, pytest_lines, runs, table
from benchmarks.accelerator import report as report_lib

REPO = jobs.REPO
TESTS = ("tests/test_ops_*.py", "tests/test_nn_*.py", "tests/test_decoding_*.py",
         "tests/test_transformations.py")  # fmt: skip
DRY_TESTS = ("tests/test_ops_masks.py",)
# The slowest test files on the GPU first (worker-seconds on the H200, 2026-11-27: nn_transformer
# 350, decoding_model 192, prefix_ensemble 135, transformations 97 for 2/3 of its tests,
# sampling 75, matmul_rng 48; the rest < 40 each), so that pytest-xdist's workers do not end
# on them one by one: 13 tests had not ended at 180 s, all from these files.
SLOW_TESTS_FIRST = ("tests/test_transformations.py", "tests/test_nn_transformer.py",
                    "tests/test_decoding_model.py", "tests/test_decoding_prefix_ensemble.py",
                    "tests/test_decoding_sampling.py", "tests/test_ops_matmul_rng.py")  # fmt: skip
README, DEEP_SAMPLED = "configs/fra_eng.py", "configs/fra_eng.py:deep_sampled"


@dataclasses.dataclass(frozen=True)
class Limit:
    """A job's time limit, and the least time worth starting it with."""

    max_s: float
    min_s: float


# On one H100. The runs' limits are their targets (the README run 2 minutes, deep_sampled 5)
# with a margin; the speed job compiles `base` four times (our step had not compiled after
# 84 s on the H200, 2026-11-27): each implementation gets until 3/4 of it. The tests: 233
# of them; 220 ended in 180 s with 8 pytest workers, alone on the H200.
LIMITS = {
    "compile": Limit(90, 30),
    "data": Limit(90, 20),
    "readme": Limit(150, 45),
    "readme_cached": Limit(90, 30),
    "readme_inline": Limit(150, 45),
    "deep_sampled": Limit(320, 90),
    "speed": Limit(270, 60),
    "gradients": Limit(60, 20),
    "tests": Limit(240, 40),
    "flags": Limit(120, 45),
}
# XLA options that trade the kernels' speed for compile time on a GPU, each timed on the
# README step in its own process (no persistent cache). Not in the default jobs: run it
# with --jobs=flags (the first GPU check: the README step compiled in 21.5 s, `base`'s
# not within 84 s).
FLAG_VARIANTS = {
    "XLA's defaults": "",
    "autotuning off": "--xla_gpu_autotune_level=0",
    "no Triton GEMMs": "--xla_gpu_enable_triton_gemm=false",
}
DRY_LIMITS = {name: Limit(90, 5) for name in LIMITS}
BUDGET_S, DRY_BUDGET_S = 470.0, 115.0

# The dry run's runs: runlocal, 6 steps, validation and checkpoint at the end only.
DRY_RUN_FLAGS = [
    "--config.num_train_steps=6",
    "--config.log_every_steps=2",
    "--config.eval_every_steps=0",
    "--config.checkpoint_every_steps=0",
    "--config.eval.num_bleu_examples=0",
    "--config.eval.num_test_examples=32",
]


@dataclasses.dataclass
class Context:
    args: argparse.Namespace
    scratch: Path  # workdirs, deep_sampled's data, compilation caches (removed at the end)
    logs: Path  # the jobs' logs, beside the JSON report

    @property
    def dry(self) -> bool:
        return self.args.dry_run

    def env(self, cache: str | None) -> dict[str, str]:
        """A job's environment: the persistent compilation cache `scratch/<cache>` (None: no
        cache), or `--cache_dir` for every job when given; the dry run compiles at XLA's
        lowest backend optimisation (seconds, not minutes, for its tiny programs)."""
        extra = {}
        if self.args.cache_dir:
            extra["JAX_COMPILATION_CACHE_DIR"] = self.args.cache_dir
        elif cache is None:
            extra["JAX_ENABLE_COMPILATION_CACHE"] = "false"
        else:
            extra["JAX_COMPILATION_CACHE_DIR"] = str(self.scratch / cache)
        xla_flags = os.environ.get("XLA_FLAGS", "")
        if self.dry and "xla_backend_optimization_level" not in xla_flags:
            extra["XLA_FLAGS"] = f"{xla_flags} --xla_backend_optimization_level=0".strip()
        return jobs.environment(**extra)

    def run(
        self, name: str, argv: list[str], timeout_s: float, cache: str | None, xla_flags: str = ""
    ) -> jobs.Job:
        env = self.env(cache)
        if xla_flags:  # a job's own XLA options, after the process's
            env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla_flags}".strip()
        return jobs.run(name, argv, timeout_s=timeout_s, log_dir=self.logs, env=env)

    def readme_config(self) -> str:
        return README + (":runlocal" if self.dry else "")

    def data_dir(self) -> Path:
        """The README runs' data: the default data directory ($TFDS_DATA_DIR, else the
        checkout's data/tfds), kept between checks."""
        from transformer_jax.data.config import default_data_dir

        return default_data_dir()

    def zip_flags(self, prefix: str = "--config.data.") -> list[str]:
        zip_path = self.args.zip_path
        return [f"{prefix}zip_path={Path(zip_path).resolve()}"] if zip_path else []


# ---------------------------------------------------------------- the jobs
def job_compile(ctx: Context, timeout_s: float) -> dict:
    out = ctx.scratch / "compile.json"
    sizes = ctx.args.compile_sizes or ("readme_local" if ctx.dry else "readme")
    argv = [sys.executable, "-m", "benchmarks.accelerator.compile_worker", f"--sizes={sizes}",
            f"--flax_wmt_dir={ctx.args.flax_wmt_dir}", f"--out={out}"]  # fmt: skip
    job = ctx.run("compile", argv, timeout_s, cache=None)  # compiles, not cache reads
    return _with_job(jobs.read_partial(out), job)


def _launch(
    ctx: Context, name: str, config: str, flags: list[str], cache: str, timeout_s: float,
    data_dir: Path | None = None,
) -> dict:  # fmt: skip
    """`experiments.train` in a fresh workdir (data in `data_dir`, default the default data
    directory), its log and files read (runs.py)."""
    workdir = ctx.scratch / "runs" / name
    if data_dir:
        flags = [f"--config.data.data_dir={data_dir}", *flags]
    data_dir = data_dir or ctx.data_dir()
    built_before = (data_dir / "fra_eng").is_dir()
    flags = [*ctx.zip_flags(), *(DRY_RUN_FLAGS if ctx.dry else []), *flags]
    job = ctx.run(name, runs.train_argv(config, workdir, flags), timeout_s, cache)
    result = runs.read_run(job, workdir)
    result["data"] = f"{data_dir}: {'already built' if built_before else 'built in this run'}"
    return _with_job(result, job)


def job_data(ctx: Context, timeout_s: float) -> dict:
    """The README run's data (dataset, SentencePiece model) in the default data directory."""
    argv = [sys.executable, "-m", "benchmarks.accelerator.data_worker",
            f"--config={ctx.readme_config()}", f"--data_dir={ctx.data_dir()}",
            *ctx.zip_flags("--")]  # fmt: skip
    job = ctx.run("data", argv, timeout_s, cache="cache_workers")
    return _with_job({"data_dir": str(ctx.data_dir())}, job)


def job_readme(ctx: Context, timeout_s: float) -> dict:
    return _launch(ctx, "readme", ctx.readme_config(), [], "cache_readme", timeout_s)


def job_readme_cached(ctx: Context, timeout_s: float) -> dict:
    """The README run again in a fresh workdir, with the first launch's compilation cache."""
    return _launch(ctx, "readme_cached", ctx.readme_config(), [], "cache_readme", timeout_s)


def job_readme_inline(ctx: Context, timeout_s: float) -> dict:
    """The README run with every program compiled when first used (`precompile=off`), its
    own empty cache: against "readme" (eval and decoders compiled in a background thread)."""
    flags = ["--config.precompile=off"]
    return _launch(ctx, "readme_inline", ctx.readme_config(), flags, "cache_inline", timeout_s)


def job_deep_sampled(ctx: Context, timeout_s: float) -> dict:
    if ctx.dry:  # the tiny deep_sampled on the checkout's data, built (building it takes a minute)
        return _launch(
            ctx, "deep_sampled", DEEP_SAMPLED + ",runlocal", [], "cache_deep_sampled", timeout_s
        )
    from transformer_jax import launch

    # Scored on the whole test split (eval.num_test_examples = 0), as its target says.
    flags = []
    if launch.load_config_file(str(REPO / DEEP_SAMPLED)).eval.num_test_examples != 0:
        flags.append("--config.eval.num_test_examples=0")
    fresh = ctx.scratch / "tfds_deep_sampled"  # data building included
    return _launch(
        ctx, "deep_sampled", DEEP_SAMPLED, flags, "cache_deep_sampled", timeout_s, data_dir=fresh
    )


def _speed(
    ctx: Context, name: str, size: str, impls: str, peak: int, timeout_s: float, trace: bool
) -> dict:
    out = ctx.scratch / f"{name}.json"
    argv = [sys.executable, "-m", "benchmarks.accelerator.speed_worker", f"--size={size}",
            f"--impls={impls}", f"--flax_wmt_dir={ctx.args.flax_wmt_dir}",
            f"--peak_size={peak}", f"--time_limit_s={timeout_s:.0f}", f"--out={out}",
            *(["--rounds=3", "--warmup=1"] if ctx.dry else [])]  # fmt: skip
    if trace:  # where ours spends its step, kernel by kernel (a trace, no compile)
        argv += [f"--trace_dir={ctx.scratch / f'{name}_trace'}",
                 f"--trace_copy={ctx.logs / f'{name}_trace.perfetto.json.gz'}"]  # fmt: skip
    job = ctx.run(name, argv, timeout_s, cache="cache_workers")
    return _with_job(jobs.read_partial(out), job)


def job_speed(ctx: Context, timeout_s: float) -> dict:
    # Warm-up order = what a cut-off job should still have measured: ours as this backend
    # runs it ("auto"), the torch peers (the targets), ours under shard_map, Flax WMT (its
    # base compiled in 42 s on the H200, once in more than 71 s), the other gradient rule.
    from transformer_jax.runtime import backend  # starts no backend

    default = backend.resolve(backend.GRADIENTS, "auto")
    other = "autodiff" if default == "custom_vjp" else "custom_vjp"
    # The same step mapped by jit(shard_map) instead of pmap (a lighter host dispatch: the
    # H200's synchronised base step spent ~8 ms beside its 40.9 ms of kernels), then the
    # other gradient rule (measured twice on the H200: autodiff kept) if time is left.
    impls = (
        f"ours ({default}),torch eager,torch.compile,ours ({default}+parallelism=shard_map),"
        f"flax wmt,ours ({other})"
    )
    size, peak = ("tiny", 256) if ctx.dry else ("base", 8192)
    return _speed(ctx, "speed", size, impls, peak, timeout_s, trace=True)


def job_gradients(ctx: Context, timeout_s: float) -> dict:
    size = "readme_local" if ctx.dry else "readme"
    impls = "ours (custom_vjp),ours (autodiff)"
    return _speed(ctx, "gradients", size, impls, 0, timeout_s, trace=False)


def job_tests(ctx: Context, timeout_s: float) -> dict:
    patterns = DRY_TESTS if ctx.dry else TESTS
    found = {f for p in patterns for f in glob.glob(p, root_dir=REPO)}
    files = [f for f in SLOW_TESTS_FIRST if f in found] + sorted(found - set(SLOW_TESTS_FIRST))
    # -v: one line per test as it ends, so a job cut off still names what failed so far.
    argv = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *files]
    if not ctx.dry and ctx.args.pytest_workers > 1 and importlib.util.find_spec("xdist"):
        argv += ["-n", str(ctx.args.pytest_workers)]
    job = ctx.run("tests", argv, timeout_s, cache="cache_workers")
    return _with_job(pytest_lines.read(job, files, patterns), job)


def job_flags(ctx: Context, timeout_s: float) -> dict:
    """The README step under each FLAG_VARIANTS entry, one fresh process each, no cache."""
    size = "readme_local" if ctx.dry else "readme"
    each = timeout_s / len(FLAG_VARIANTS)
    variants: dict[str, Any] = {}
    job = None
    for i, (label, flags) in enumerate(FLAG_VARIANTS.items()):
        out = ctx.scratch / f"flags_{i}.json"
        argv = [sys.executable, "-m", "benchmarks.accelerator.speed_worker", f"--size={size}",
                "--impls=ours (auto)", "--peak_size=0", f"--time_limit_s={each:.0f}",
                f"--out={out}", *(["--rounds=3", "--warmup=1"] if ctx.dry else [])]  # fmt: skip
        job = ctx.run(f"flags_{i}", argv, each, cache=None, xla_flags=flags)
        measured = (jobs.read_partial(out) or {}).get("impls", {}).get("ours (auto)")
        if not isinstance(measured, dict) or "step_ms" not in measured:
            measured = measured if isinstance(measured, str) else f"not measured: {job.status}"
        variants[label] = {"xla_flags": flags or "(none)", "result": measured}
    return _with_job({"size": size, "variants": variants}, job)


def _with_job(result: dict | None, job: jobs.Job) -> dict:
    """A job's result with its status and log; a worker that wrote nothing says why."""
    if result is None:
        result = {"result": f"not measured: {job.status} (see {job.log})"}
    return {**result, "status": job.status, "job": job.summary()}


JOBS = {
    "compile": job_compile,
    "data": job_data,
    "readme": job_readme,
    "readme_cached": job_readme_cached,
    "readme_inline": job_readme_inline,
    "deep_sampled": job_deep_sampled,
    "speed": job_speed,
    "gradients": job_gradients,
    "tests": job_tests,
    "flags": job_flags,
}
# flags and readme_inline (precompile's A/B, ~100 s more): when asked for
DEFAULT_JOBS = [name for name in JOBS if name not in ("flags", "readme_inline")]


# ---------------------------------------------------------------- the command
def default_out(dry: bool) -> Path:
    name = "accelerator_check" + ("_dry_run" if dry else "")
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / f"{name}.json"
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    return REPO / "benchmarks" / "results" / f"{name}_{stamp}.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry_run", action="store_true", help="Every job tiny, on the CPU.")
    parser.add_argument("--flax_wmt_dir", default="", help="A copy of flax's examples/wmt.")
    parser.add_argument("--out", default="", help="The JSON report; the logs go beside it.")
    parser.add_argument(
        "--jobs",
        default=",".join(DEFAULT_JOBS),
        help=f"Some of {list(JOBS)}, run in the order given (default: all but flags).",
    )
    parser.add_argument("--budget_s", type=float, default=0.0, help="All jobs together.")
    parser.add_argument(
        "--limit", action="append", default=[], metavar="JOB=SECONDS", help="Or all=SECONDS."
    )
    parser.add_argument("--zip_path", default="", help="The fra-eng zip for the runs' data.")
    parser.add_argument("--compile_sizes", default="", help="compile job: readme,base,...")
    # 16 host cores on the GPU machine; the tests are mostly compiling (host work)
    parser.add_argument("--pytest_workers", type=int, default=12)
    parser.add_argument(
        "--cache_dir",
        default="",
        help="One persistent compilation cache for every job (compiles may then be cache "
        "reads); default: a fresh one per run, the second README launch reusing the first's, "
        "none for the compile job.",
    )
    parser.add_argument("--keep_scratch", action="store_true", help="Keep workdirs, caches.")
    args = parser.parse_args(argv)
    args.jobs = [j for j in args.jobs.split(",") if j]
    unknown = sorted(set(args.jobs) - set(JOBS))
    if unknown:
        parser.error(f"unknown --jobs {unknown}; choose from {list(JOBS)}")
    if len(set(args.jobs)) != len(args.jobs):
        parser.error(f"--jobs names a job twice: {args.jobs}")
    readme_jobs = [i for i, j in enumerate(args.jobs) if j.startswith("readme")]
    if readme_jobs and "data" not in args.jobs:
        args.jobs.insert(readme_jobs[0], "data")  # the README runs start with their data built
    limits = dict(DRY_LIMITS if args.dry_run else LIMITS)
    for item in args.limit:  # JOB=SECONDS, or all=SECONDS
        name, _, seconds = item.partition("=")
        if name not in [*limits, "all"] or not seconds.replace(".", "", 1).isdigit():
            parser.error(f"--limit {item!r}: write JOB=SECONDS, JOB one of {[*JOBS, 'all']}")
        for job in limits if name == "all" else [name]:
            limits[job] = Limit(float(seconds), min(limits[job].min_s, float(seconds)))
    args.limits = limits
    if args.flax_wmt_dir:
        args.flax_wmt_dir = str(Path(args.flax_wmt_dir).resolve())
    args.budget_s = args.budget_s or (DRY_BUDGET_S if args.dry_run else BUDGET_S)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    start = time.perf_counter()
    out = Path(args.out) if args.out else default_out(args.dry_run)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="accelerator_check_"))
    ctx = Context(args, scratch, out.with_name(out.stem + "_logs"))
    given = sys.argv[1:] if argv is None else argv
    report: dict[str, Any] = {
        "check": "benchmarks.accelerator_check",
        "command": " ".join(["python -m benchmarks.accelerator_check", *given]),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        **report_lib.environment_info(),
        "dry_run": args.dry_run,
        "budget_s": args.budget_s,
        "flax_wmt_dir": args.flax_wmt_dir or "not given",
    }
    results: dict[str, dict] = {}
    try:
        for name in JOBS:
            if name not in args.jobs:
                results[name] = {"not_run": "not measured: not in --jobs"}
        for name in args.jobs:  # in the order given (default: JOBS's)
            left = args.budget_s - (time.perf_counter() - start)
            if left < args.limits[name].min_s:
                results[name] = {"not_run": f"not measured: {max(left, 0):.0f} s of the "
                                 f"{args.budget_s:.0f} s budget were left"}  # fmt: skip
                print(f"[accelerator_check] {name}: not run ({left:.0f} s left)", flush=True)
                continue
            timeout = min(args.limits[name].max_s, left)
            print(f"[accelerator_check] {name}: limit {timeout:.0f} s ...", flush=True)
            results[name] = JOBS[name](ctx, timeout)
            wall = results[name]["job"]["wall_s"]
            print(f"[accelerator_check] {name}: {results[name]['status']} ({wall:.0f} s)",
                  flush=True)  # fmt: skip
    finally:
        if not args.keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    report["stages"] = report_lib.stages(results)
    report["jobs"] = {n: r.get("job", r.get("not_run")) for n, r in results.items()}
    report["wall_s"] = round(time.perf_counter() - start, 1)
    out.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    print(table.format_table(report))
    again = [n for n, r in results.items() if n in args.jobs and r.get("status", "") != "ok"]
    print(f"\nwall {report['wall_s']:.0f} s; JSON: {out}; logs: {ctx.logs}")
    if again:
        print(f"Not complete: {', '.join(again)} (run them again: --jobs={','.join(again)})")
    return report


if __name__ == "__main__":
    main()
