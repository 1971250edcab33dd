"""Runs that share a data_dir: one process builds the dataset (or trains SentencePiece), the
others wait and reuse it (`data/locks.py`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from tests.helpers import REPO, subprocess_env
from transformer_jax.data import locks

pytest_plugins = ["tests.conftest_data"]


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_second_process_waits_for_the_lock_then_takes_it(tmp_path):
    lock = tmp_path / "sub" / "x.lock"
    with locks.exclusive(lock):
        other = _python(
            f"""
            from absl import logging
            from transformer_jax.data import locks
            logging.set_verbosity(logging.INFO)
            with locks.exclusive({str(lock)!r}, what="the test"):
                print("acquired", flush=True)
            """
        )
        time.sleep(3.0)  # the other process has started and tried by now
        assert other.poll() is None, other.communicate()[0]  # still waiting
    output, _ = other.communicate(timeout=60)
    assert other.returncode == 0 and "acquired" in output, output
    assert "Waiting for another process to finish the test" in output


def test_two_processes_building_one_dataset_at_once_both_succeed(
    tmp_path, make_zip, synthetic_lines
):
    zip_path = make_zip(tmp_path / "corpus.zip", synthetic_lines(400, 3))
    code = f"""
        from tests.conftest_data import _small_config
        from pathlib import Path
        from transformer_jax.data import datasets
        cfg = _small_config(Path({str(tmp_path)!r}), Path({str(zip_path)!r}))
        builder = datasets.prepared_builder(cfg)
        print("examples", builder.info.splits["full"].num_examples, flush=True)
        """
    first, second = _python(code), _python(code)
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, "\n".join(o[-3000:] for o in outputs)
    assert all("examples 1200" in o for o in outputs), outputs
    built = sorted(p.name for p in (tmp_path / "tfds" / "fra_eng").glob("val*/*"))
    assert built == ["1.0.0"], built  # one build, no `incomplete.*` leftovers
