"""runtime.compile_log: every program counted once, with its kind and cache hits; a training
launch compiles one train step, one eval program and at most two decoders, and a second run
of the config takes them from the persistent cache."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import monitoring as jax_monitoring

from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.runtime import compile_log

LINE = re.compile(
    r"Compiled: (\d+) programs? in ([\d.]+) s \(init: [\d.]+, train step: [\d.]+, "
    r"eval: [\d.]+, decode: [\d.]+(, other: [\d.]+)?; (\d+) from the persistent cache"
    r"(; [\d.]+ s of them in a background thread)?\)"
)


def test_each_program_is_recorded_once_with_the_kind_around_its_first_call():
    @jax.jit
    def f(x):
        return jnp.sin(x) * 3.0 + 1.25  # a program of its own (constants unlike other tests)

    three, five = np.ones(3, np.float32), np.ones(5, np.float32)  # numpy: no programs of their own
    with compile_log.recording() as log:
        with compile_log.kind("train step"):
            f(three)
            f(three)  # compiled: nothing new
        with compile_log.kind("eval"):
            f(five)  # a new shape: a new program
        f(three)  # still compiled
    names = [(p.name, p.kind) for p in log.programs]
    assert names == [("jit(f)", "train step"), ("jit(f)", "eval")]
    assert all(p.seconds > 0 for p in log.programs)
    assert log.count("train step") == 1 and log.count("decode") == 0
    by_kind = log.seconds_by_kind()
    assert list(by_kind)[:4] == ["init", "train step", "eval", "decode"]
    assert by_kind["decode"] == 0.0 and by_kind["eval"] > 0
    match = LINE.fullmatch(log.summary_line())
    assert match and match.group(1) == "2", log.summary_line()
    # The listeners live only while a recording is open.
    assert compile_log._duration_listener not in jax_monitoring.get_event_duration_listeners()
    assert compile_log._event_listener not in jax_monitoring.get_event_listeners()


def test_nested_recordings_both_see_the_inner_programs():
    @jax.jit
    def g(x):
        return jnp.cos(x) - 0.75

    with compile_log.recording() as outer:
        with compile_log.recording() as inner:
            g(np.ones(2, np.float32))
        g(np.ones(4, np.float32))
    assert len(inner.programs) == 1 and len(outer.programs) == 2


def test_a_program_from_the_persistent_cache_is_marked(tmp_path):
    """In a fresh process with its own cache: compile, drop the in-memory caches, compile
    again; the second is read from the persistent cache."""
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np
        from transformer_jax.runtime import compile_log

        f = jax.jit(lambda x: jnp.tanh(x) @ x.T)
        with compile_log.recording() as log:
            f(np.ones((4, 4), np.float32))
            jax.clear_caches()
            f(np.ones((4, 4), np.float32))
        print([p.cached for p in log.programs], log.num_cached)
        """
    )
    env = {
        **subprocess_env(),
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[False, True] 1"


@pytest.mark.slow  # trains for real, twice
@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_a_launch_compiles_few_programs_and_a_second_run_reads_them_from_the_cache(tmp_path):
    """The first launch compiles its eval and decoding programs in a background thread
    (`precompile`: what "auto" does on an accelerator), the second as XLA:CPU's default does:
    the same programs, the same report."""
    env = {
        **subprocess_env(),
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    records, reports, lines_out = [], [], []
    for run, precompile in (("first", "background"), ("second", "auto")):
        workdir = tmp_path / run
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "experiments.train",
                "--config=configs/fra_eng.py:runlocal",
                f"--workdir={workdir}",
                "--config.num_train_steps=4",
                "--config.log_every_steps=2",
                "--config.eval_every_steps=4",
                "--config.checkpoint_every_steps=4",
                # As many pairs as a decoding batch (64 rows): the loop's BLEU and the report
                # share their programs, as the README and deep_sampled runs do.
                "--config.eval.num_bleu_examples=64",
                "--config.eval.num_test_examples=64",
                f"--config.precompile={precompile}",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert LINE.search(out.stdout), out.stdout[-2000:]
        lines_out.append(LINE.search(out.stdout).group(0))
        lines = (workdir / "compile_log.jsonl").read_text().splitlines()
        assert len(lines) == 1
        records.append(json.loads(lines[0]))
        reports.append(json.loads((workdir / "eval_report.json").read_text()))
    first, second = ([p for p in r["programs"]] for r in records)

    def count(programs, kind):
        return sum(p["kind"] == kind for p in programs)

    # Packed rows: one train-step shape; fixed-shape eval batches: one eval program, shared by
    # the loop's validation and the report's teacher-forced loss; two decoder widths at most.
    assert count(first, "train step") == 1
    assert count(first, "eval") == 1
    assert 1 <= count(first, "decode") <= 2
    assert count(first, "init") >= 1
    # The second run (a fresh workdir) compiles the same programs and reads the big ones.
    big = ("train step", "eval", "decode", "init")
    assert sorted((p["name"], p["kind"]) for p in first if p["kind"] in big) == sorted(
        (p["name"], p["kind"]) for p in second if p["kind"] in big
    )
    assert all(p["cached"] for p in second if p["kind"] in ("train step", "eval", "decode"))
    assert not any(p["cached"] for p in first if p["kind"] in ("train step", "eval", "decode"))
    # Ahead in the first run: every eval and decoding program (the loop's BLEU and the
    # report's), none of them again on the main thread; none in the second (CPU: "off").
    ahead = [p["kind"] for p in first if p["background"]]
    assert sorted(ahead) == sorted(p["kind"] for p in first if p["kind"] in ("eval", "decode"))
    assert not any(p["background"] for p in second)
    assert [" of them in a background thread" in line for line in lines_out] == [True, False]
    # Compiling ahead changes no result: the same report, translation for translation.
    same = ("bleu", "chrf", "loss", "samples", "generated_tokens", "bleu_by_length")
    assert {k: reports[0][k] for k in same} == {k: reports[1][k] for k in same}
