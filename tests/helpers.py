"""Shared test helpers: the subprocess environment, the tiny real-data run, and the
matmul-precision pin of the tests that compare against float64. Tiny models and random
parameters: `transformer_jax.testing`.

Test modules import from here (never from each other), so each test file stays runnable
on its own and pytest collects every test exactly once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

REPO = Path(__file__).resolve().parents[1]
# Shared by every training test's subprocesses: each compile (~10-20 s on 2 busy cores) is
# paid once per machine, not once per process.
JAX_CACHE = Path(tempfile.gettempdir()) / "transformer_jax_test_jax_cache"


# --- the matmul precision of tests that compare against float64 ------------------------

MATMUL_PRECISION = "float32"


@pytest.fixture
def float32_matmuls():
    """float32 matmuls on every backend, for tests that check float32 results at float32
    tolerances (against float64 numpy or against another computation of the same values).

    Unpinned, a float32 matmul runs at the backend's default precision: float32 on CPU,
    TF32 (10-bit mantissa, ~1e-3 relative error) on Ampere/Hopper GPUs, one bfloat16 pass
    on TPU; on an H100 tests/test_nn_formulas.py failed at atol 2e-5 that way. The pinned
    jax 0.10.2 takes "float32" and "highest" as aliases of `lax.Precision.HIGHEST`: plain
    float32 on GPU, 6 bfloat16 passes on TPU, nothing changes on CPU. "float32" names what
    these tests assume. Not "tensorfloat32"/"high" (TF32 on GPUs, 3 passes on TPU), and
    not the "F32_F32_F32" dot-algorithm preset: that one casts bfloat16 operands to
    float32, whereas a `Precision` only changes how float32 operands are multiplied, so
    the bfloat16 tests of a pinned module still run their bfloat16 x bfloat16 matmuls as
    users do. A test that wants another setting enters its own
    `jax.default_matmul_precision` inside.

    The setting acts when a function is traced: it is part of the jit cache key, so a
    jitted function called under the pin is traced again with it, but a jaxpr traced or a
    program compiled (`.lower().compile()`) outside the pin keeps the default: compute
    compared values inside the test, not in a module-scoped fixture, which runs first. A
    subprocess is out of its reach: give it `JAX_DEFAULT_MATMUL_PRECISION=MATMUL_PRECISION`.

    Use: `from tests.helpers import float32_matmuls` and
    `pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)`. Not in conftest.py:
    tests that are not precision-sensitive run as users run. tests/test_precision_pins.py
    checks that the pin reaches every matmul of the model.
    """
    with jax.default_matmul_precision(MATMUL_PRECISION):
        yield


def subprocess_env(devices: int | None = None) -> dict[str, str]:
    """Environment for a JAX subprocess: the repo first on the path, the compilation cache,
    and `devices` fake CPU devices, on the CPU backend (on a GPU machine JAX would otherwise
    compute on its one GPU, and a test that counts its devices would fail). XLA's backend
    optimisation is lowered: it halves compile time, and these tiny models run in
    milliseconds either way.

    The caller's PYTHONPATH is kept after the repo: packages may be installed there (the GPU
    machine's carried wheels, `--target /tmp/site`), and on 2026-11-27 the two two-device
    tests failed there in a second without them, unable to import flax."""
    flags = ["--xla_backend_optimization_level=0"]
    platforms = {}
    if devices:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
        platforms["JAX_PLATFORMS"] = "cpu"
    path = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(path)),
        "XLA_FLAGS": " ".join(flags),
        "JAX_COMPILATION_CACHE_DIR": str(JAX_CACHE),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.5",
        **platforms,
    }


def run_npz_worker(
    script_text: str, directory: Path, args: list[str], devices: int | None = None
) -> dict[str, np.ndarray]:
    """Runs `script_text` (a worker that saves arrays with `np.savez(sys.argv[1], ...)`) in a
    subprocess with `devices` fake CPU devices; returns what it saved."""
    script = directory / "worker.py"
    script.write_text(script_text)
    out = directory / f"worker_{devices or 1}.npz"
    result = subprocess.run(
        [sys.executable, str(script), str(out), *args],
        env=subprocess_env(devices),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(np.load(out))


# --- a tiny training run on the real corpus, through the launcher ----------------------

STEPS, EVERY = 150, 50
# The tiny model on 1000 training pairs, one padded shape (no bucketing): few compiles.
FLAGS = [
    "--config=configs/fra_eng.py:runlocal",
    "--config.data.train_split=train[:1000]",
    "--config.data.bucketing=False",
    "--config.data.max_src_len=8",
    "--config.data.max_tgt_len=8",
    "--config.data.num_eval_examples=64",
    f"--config.num_train_steps={STEPS}",
    f"--config.checkpoint_every_steps={EVERY}",
    f"--config.eval_every_steps={STEPS}",
    "--config.log_every_steps=50",
    "--config.keep_checkpoints=2",
    "--config.eval.num_bleu_examples=8",
]


def launch(workdir: Path, *extra: str, devices: int | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.train", f"--workdir={workdir}", *FLAGS, *extra],
        cwd=REPO,
        env=subprocess_env(devices),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen, timeout: float = 300) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-6000:]
    return output


def flat_params(workdir: Path, step: int | None = None) -> np.ndarray:
    from transformer_jax.inference import Translator

    return np.asarray(ravel_pytree(Translator.from_workdir(workdir, step).params)[0])


# The serving tests' words: a tiny random model's vocabulary, source and target alike.
SERVING_WORDS = "go i lost he is calm home . ! va j'ai perdu il est calme chez moi".split()


def serving_translator():
    """A `Translator` of a tiny random model over `SERVING_WORDS` (learned positions up to
    32, at most 8 generated tokens), as the serving tests decode with."""
    from transformer_jax.data.vocab import SPECIAL_TOKENS
    from transformer_jax.data.word_tokenizer import WordTokenizer
    from transformer_jax.inference import Translator
    from transformer_jax.testing import random_params, tiny_config

    tokenizer = WordTokenizer([*SPECIAL_TOKENS, *SERVING_WORDS])
    cfg = tiny_config(tokenizer.vocab_size, tokenizer.vocab_size, max_len=32)
    return Translator.from_params(
        cfg, random_params(cfg, seed=4), tokenizer, tokenizer, max_decode_len=8
    )


def without_cut_notes(text: str) -> str:
    """`text` (a translate command's stderr) without the notes on outputs cut by their
    budget, which an almost untrained test model earns on most lines (a prompt before one
    stays)."""
    return re.sub(r"note: sentence #?\d+'s translation was cut at [^\n]*\n", "", text)


def one_fatal_line(result: subprocess.CompletedProcess) -> str:
    """The one `FATAL:` line of a launcher that ended cleanly with exit 2 (no traceback)."""
    assert result.returncode == 2, result.stderr[-4000:]
    fatal = [line for line in result.stderr.splitlines() if line.startswith("FATAL:")]
    assert len(fatal) == 1, result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    return fatal[0]


def last_fatal_line(result: subprocess.CompletedProcess) -> str:
    """The last stderr line of a launcher, checked to be the FATAL line of a clean exit 2."""
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("FATAL: "), last
    return last


def run_module(
    *args: str, stdin: str = "go .\n", timeout: float = 300
) -> subprocess.CompletedProcess:
    """`python -m <args>` from the repository (the export and serving launchers' tests),
    `stdin` on its standard input."""
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, env=subprocess_env(), capture_output=True,
        text=True, input=stdin, timeout=timeout,
    )  # fmt: skip


def run_module_after(
    script: str, module: str, *args: str, devices: int | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`python -m <module> <args>` with `script` (Python: a fault injected, a limit set) run
    first in the same process; stdin empty."""
    prelude = textwrap.dedent(script) + textwrap.dedent(
        f"""
        import runpy, sys
        sys.argv = [{module!r}, *sys.argv[1:]]
        runpy.run_module({module!r}, run_name="__main__")
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude, *args],
        cwd=REPO,
        env=subprocess_env(devices),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def only_fatal_line(result: subprocess.CompletedProcess, *words: str) -> None:
    """The launcher printed nothing but one `FATAL:` line holding every one of `words`, and
    exited 2."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.startswith("FATAL: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    for word in words:
        assert word in result.stderr, result.stderr
