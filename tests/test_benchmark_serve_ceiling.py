"""`benchmarks.serve_ceiling`: the engine alone and the HTTP path alone, for real on the tiny
run, and the estimate it prints from them."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from benchmarks.serve_ceiling import EchoEngine, combined, table
from tests.helpers import REPO, subprocess_env


def test_the_estimate_adds_each_sentences_two_costs_and_the_ceiling_divides_by_one_client():
    # 4 ms of engine and 1 ms of HTTP a sentence: 200 a second.
    assert combined(250.0, 1000.0) == pytest.approx(200.0)
    lines = table([1, 64], [1, 64], [250.0, 500.0], [1000.0, 1000.0], 125.0).splitlines()
    assert lines[2] == "| 1 | 1 | 250.0 | 1000.0 | 200.0 | 2.00x |"
    assert lines[3] == "| 64 | 64 | 500.0 | 1000.0 | 333.3 | 4.00x |"  # 3 ms a sentence
    unmeasured = table([1], [1], [250.0], [1000.0], None).splitlines()
    assert unmeasured[2].endswith("| not measured |")


def test_the_echo_engine_answers_each_line_with_itself_and_takes_request_options():
    engine = EchoEngine()
    options = engine.options({"beam_size": 2})
    assert options.beam_size == 2
    assert engine.translate(["a", "b c"], options) == [[{"text": "a"}], [{"text": "b c"}]]


@pytest.mark.slow
def test_a_trained_run_is_measured_alone_over_http_and_served(tiny_workdir):
    command = [sys.executable, "-m", "benchmarks.serve_ceiling", f"--workdir={tiny_workdir}",
               "--clients=1,3", "--sentences=6", "--beam_size=2", "--cpu_devices=1"]  # fmt: skip
    result = subprocess.run(
        command, cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    one_client = re.search(r"^the server's one client: ([\d.]+) sentences/s$", result.stdout, re.M)
    assert one_client and float(one_client.group(1)) > 0
    number = r"([\d.]+)"
    row = rf"^\| (\d+) \| (\d+) \| {number} \| {number} \| {number} \| {number}x \|$"
    rows = re.findall(row, result.stdout, re.M)
    assert [(c, b) for c, b, *_ in rows] == [("1", "1"), ("3", "3")]
    for _, _, engine, http, both, most in rows:
        assert float(engine) > 0 and float(http) > 0
        assert float(both) == pytest.approx(combined(float(engine), float(http)), abs=0.1)
        assert float(most) == pytest.approx(float(engine) / float(one_client.group(1)), rel=0.02)
