"""The evaluate launcher refuses a negative --num_samples in one FATAL line (it was accepted
and showed no samples)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO, one_fatal_line, subprocess_env


def test_a_negative_num_samples_is_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.evaluate", f"--workdir={tmp_path}", "--num_samples=-2"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "--num_samples=-2" in one_fatal_line(result)
