"""Every entry point runs: each `benchmarks.*` and `experiments.*` module (issue 40, item 6).

Two checks per module, so that an import inside a function cannot hide a moved name (as
`benchmarks.d2l_check` once imported `quiet_library_logs` from a module it had left):

- `test_every_import_resolves`: every project import in the module's source, at the top or
  inside a function, names a module that exists and a name it has; nothing is run.
- `test_runs`: the module started as a user starts it (`python -m`, in a subprocess), on its
  smallest path: a tiny setting of a benchmark, `--print_config`, `--dry_run` or `--check` of
  a launcher; the tools that read a trained run start on a directory that holds none, import
  what their `main` needs and refuse in one FATAL line (their real paths on trained runs are
  the tests named in `RUNS_FOR_REAL`); `--help` (flags parsed, the module imported) where
  even the smallest real path takes minutes.

Left out: `benchmarks.accelerator_check` and `benchmarks/accelerator/` (their own dry-run test,
tests/test_benchmark_accelerator_check.py), and `experiments.colab_tpu`, a notebook (running it
trains a model; `build_notebook --check` keeps it in step with the .ipynb), which gets the
import check only.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, subprocess_env

PROJECT = ("transformer_jax", "configs", "benchmarks", "experiments", "tests")
LEFT_OUT = {"benchmarks.accelerator_check"}  # and the package benchmarks/accelerator/
EMPTY = "{empty}"  # replaced by an empty directory: a workdir that holds no run

NO_RUN = "is not a training workdir"  # the FATAL line of a tool given a directory without a run

# module -> (arguments of its smallest path, what it prints (stdout or stderr), exit code);
# exit code 2 is a refusal in one FATAL line.
SMALLEST_PATHS: dict[str, tuple[list[str], str, int]] = {
    # --- launchers
    "experiments.train": (
        ["--config=configs/fra_eng.py:runlocal", "--print_config"],
        "num_train_steps: ",
        0,
    ),
    "experiments.translate": ([f"--workdir={EMPTY}", "go ."], NO_RUN, 2),
    "experiments.evaluate": ([f"--workdir={EMPTY}"], NO_RUN, 2),
    "experiments.export": ([f"--workdir={EMPTY}", f"--output_dir={EMPTY}/export"], NO_RUN, 2),
    "experiments.average_checkpoints": ([f"--workdir={EMPTY}"], NO_RUN, 2),
    "experiments.sweep": (
        ["--config=configs/fra_eng.py:runlocal", "--sweep=norm_placement", "--dry_run"],
        "-m experiments.train",
        0,
    ),
    "experiments.build_notebook": (["--check"], "", 0),
    "experiments.serve": ([f"--workdir={EMPTY}", "--port=0"], NO_RUN, 2),
    # --- benchmarks
    "benchmarks.decode": (
        [
            "--variant=d2l",
            "--vocab_size=64",
            "--batch=4",
            "--src_len=6",
            "--decode_len=6",
            "--beam_sizes=1,2",
            "--norecompute",
            "--noctranslate2",
            "--latency_len=0",
            "--repeats=1",
            "--cpu_devices=0",
        ],
        "JAX beam 2",
        0,
    ),
    "benchmarks.config_step": (
        ["--config=configs/fra_eng.py:runlocal", "--steps=1"],
        "steps/s",
        0,
    ),
    "benchmarks.profile_step": (
        ["--config=configs/benchmark.py:d2l", "--steps=1", f"--trace_dir={EMPTY}/trace"],
        "per step",
        0,
    ),
    "benchmarks.train_step": (
        ["--config=configs/benchmark.py:d2l", "--steps=1", "--warmup=0", "--no_torch"],
        "| d2l | transformer_jax |",
        0,
    ),
    "benchmarks.paragraphs": ([f"--workdir={EMPTY}"], NO_RUN, 2),
    "benchmarks.length_gap": ([f"--workdir={EMPTY}"], NO_RUN, 2),
    # Starts experiments.serve, which refuses the directory: its FATAL line, relayed.
    "benchmarks.serve": ([f"--workdir={EMPTY}", "--clients=1", "--requests=1"], NO_RUN, 2),
    "benchmarks.serve_ceiling": ([f"--workdir={EMPTY}"], NO_RUN, 2),
    # Minutes even at their smallest (training, or the corpus and a tokenizer to prepare).
    "benchmarks.time_to_bleu": (["--help"], "--checkpoints_min", 0),
    "benchmarks.bucketing": (["--help"], "--steps", 0),
    "benchmarks.grain_loader": (["--help"], "--turns", 0),
    "benchmarks.input_pipeline": (["--help"], "--seconds", 0),
    "benchmarks.sampling_draws": (["--help"], "--sentences", 0),
}
# module -> the library it needs that requirements.txt does not pin: without it, the module
# says so in one line (exit code 1) instead of running.
UNPINNED = {"benchmarks.grain_loader": "grain"}
# Entry points whose real run is a test of its own (the EMPTY paths above only start them).
RUNS_FOR_REAL = {
    "benchmarks.d2l_check": "tests/test_benchmark_d2l_check.py (the book's check, one seed)",
    "experiments.translate": "tests/test_translate_cli.py",
    "experiments.evaluate": "tests/test_train_end_to_end.py",
    "experiments.export": "tests/test_export_ctranslate2.py, tests/test_export_stablehlo.py",
    "experiments.average_checkpoints": "tests/test_checkpoint_averaging.py",
    "benchmarks.length_gap": "tests/test_benchmark_length_gap.py (its tables)",
    "experiments.serve": "tests/test_serving_http.py (a trained run served, spoken to over HTTP)",
    "benchmarks.serve_ceiling": "tests/test_benchmark_serve_ceiling.py (on the tiny run)",
}


def _modules(package: str) -> list[str]:
    return sorted(
        f"{package}.{path.stem}"
        for path in (REPO / package).glob("*.py")
        if path.stem != "__init__" and f"{package}.{path.stem}" not in LEFT_OUT
    )


MODULES = _modules("benchmarks") + _modules("experiments")


def _source(module: str) -> Path:
    return REPO / f"{module.replace('.', '/')}.py"


def _is_entry_point(module: str) -> bool:
    return "__main__" in _source(module).read_text(encoding="utf-8")


def _project_imports(module: str) -> list[tuple[str, str | None]]:
    """(module, name) of every `from X import name` and (module, None) of every `import X`
    of a project package in the source, function-level imports included."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PROJECT:
                out += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.split(".")[0] in PROJECT]
    return out


def test_every_entry_point_has_a_smallest_path():
    """A new `benchmarks.*` or `experiments.*` entry point needs a row in SMALLEST_PATHS (or a
    test of its own in RUNS_FOR_REAL)."""
    entry_points = {m for m in MODULES if _is_entry_point(m)}
    assert entry_points == set(SMALLEST_PATHS) | {"benchmarks.d2l_check"}


@pytest.mark.parametrize("module", MODULES)
def test_every_import_resolves(module):
    for name, attr in _project_imports(module):
        imported = importlib.import_module(name)
        if attr is not None and not hasattr(imported, attr):
            assert importlib.util.find_spec(f"{name}.{attr}") is not None, (
                f"{module}: `from {name} import {attr}`: {name} has no {attr!r}"
            )


@pytest.mark.parametrize("module", sorted(SMALLEST_PATHS))
def test_runs(module, tmp_path):
    args, expected, exit_code = SMALLEST_PATHS[module]
    if module in UNPINNED and importlib.util.find_spec(UNPINNED[module]) is None:
        expected, exit_code = f"pip install {UNPINNED[module]}", 1
    result = subprocess.run(
        [sys.executable, "-m", module, *(a.replace(EMPTY, str(tmp_path)) for a in args)],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == exit_code and "Traceback" not in output, output[-4000:]
    if exit_code == 2:
        fatal = [line for line in result.stderr.splitlines() if line.startswith("FATAL: ")]
        assert len(fatal) == 1, output[-4000:]
    assert expected in output, output[-4000:]
