"""A run whose token budget sets the training rows fits any device count.

With `data.batch_tokens` (packed rows, length buckets) `data.batch_size` sizes only the eval
batches; it was still required to split evenly over the devices, so the README command was
refused on 3, 5, 6 or 7 devices ("data.batch_size=128 must be a positive multiple of ... 3").
Now those eval batches round up to a multiple of the devices (dummy rows of zero weight), and
every validation example counts once, as on one device.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from configs import fra_eng
from tests.helpers import REPO, subprocess_env
from tests.tiny_run import tiny_command
from transformer_jax.data.config import SHARED_ZIP, eval_rows
from transformer_jax.training.config import validate_config


@pytest.mark.parametrize("devices", [1, 2, 3, 5, 6, 7, 8])
def test_the_readme_config_fits_any_device_count(devices):
    config = fra_eng.get_config()
    validate_config(config, num_devices=devices)
    rows = eval_rows(config.data, devices)
    assert rows % devices == 0 and 128 <= rows < 128 + devices


def test_a_batch_size_that_sets_the_training_rows_must_still_divide():
    config = fra_eng.get_config("d2l")  # 64 rows a training batch: no budget
    with pytest.raises(ValueError, match=r"data.batch_size=64 must be a positive multiple .* 63"):
        validate_config(config, num_devices=3)
    assert eval_rows(config.data, 2) == 64  # the training shape, where it divides


@pytest.mark.parametrize(("rows", "devices", "expected"), [(10, 3, 12), (8, 2, 8), (1, 4, 4)])
def test_a_loss_batch_size_rounds_up_to_the_devices(rows, devices, expected):
    config = fra_eng.get_config("d2l")
    config.eval.loss_batch_size = rows  # any size: dummy rows of zero weight fill the rest
    validate_config(config, num_devices=2)
    assert eval_rows(config.data, devices, config.eval.loss_batch_size) == expected


@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_packed_rows_train_on_three_devices_and_validate_every_example_once(tmp_path):
    # The tiny run with packed rows of a 144-token budget (6 rows of 24) and 16 eval rows.
    budget = ["--config.data.packing=True", "--config.data.batch_tokens=144"]
    tokens = {}
    for devices in (1, 3):
        workdir = tmp_path / f"run{devices}"
        result = subprocess.run(
            tiny_command(workdir, 2, *budget),
            cwd=REPO,
            env=subprocess_env(devices=devices),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"on {devices} devices" in result.stderr, result.stderr[-3000:]
        records = [json.loads(line) for line in (workdir / "metrics.jsonl").open()]
        tokens[devices] = [r["tokens"] for r in records if r["split"] == "eval"]
    assert tokens[1] == tokens[3] and len(tokens[1]) == 1, tokens
