"""Two local processes (jax.distributed over 127.0.0.1, one CPU device each) end with the
same parameters as one process with two devices: each process reads its own data shard."""

from __future__ import annotations

import socket
import subprocess

import numpy as np
import pytest

from tests.helpers import FLAGS, flat_params, launch
from transformer_jax.data.config import SHARED_ZIP

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"),
]

SHORT = [
    "--config.num_train_steps=6",
    "--config.checkpoint_every_steps=0",
    "--config.eval_every_steps=0",
    "--config.log_every_steps=3",
    "--config.eval.num_bleu_examples=0",
    "--config.eval.num_batches=1",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # trains for real
def test_two_processes_match_one_process_with_two_devices(tmp_path):
    assert FLAGS  # the same tiny config as the end-to-end test
    # All three processes at once: the 1-process, 2-device reference and the 2-process run.
    port = free_port()
    workdir = tmp_path / "multi"
    processes = [launch(tmp_path / "single", *SHORT, devices=2)] + [
        launch(
            workdir,
            *SHORT,
            f"--coordinator_address=127.0.0.1:{port}",
            "--num_processes=2",
            f"--process_id={i}",
        )
        for i in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=300)[0] for p in processes]
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        raise
    for p, output in zip(processes, outputs, strict=True):
        assert p.returncode == 0, output[-4000:]
    assert "on 2 devices" in outputs[0] and "on 2 devices" in outputs[1]
    assert "Process 0/2: 1 local of 2 devices" in outputs[1]

    np.testing.assert_allclose(
        flat_params(workdir), flat_params(tmp_path / "single"), atol=1e-6, rtol=1e-5
    )
