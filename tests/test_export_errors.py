"""experiments.export and translate --engine=ctranslate2 refuse what they cannot do in one
FATAL line (exit 2, no traceback, nothing written): a directory that holds no run, an
--output_dir that exists, a --model_dir that holds no CTranslate2 export. The CTranslate2
engine on a StableHLO export is in tests/test_export_stablehlo.py (it needs one)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env

pytest.importorskip("ctranslate2")
pytest.importorskip("flatbuffers")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, env=subprocess_env(), capture_output=True,
        text=True, input="go .\n", timeout=300,
    )  # fmt: skip


def assert_one_fatal_line(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.startswith("FATAL: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    for word in words:
        assert word in result.stderr


@pytest.mark.parametrize("fmt", ["ctranslate2", "stablehlo"])
def test_export_refusals_are_one_fatal_line(fmt, tmp_path):
    not_a_run = tmp_path / "notes"
    not_a_run.mkdir()
    (not_a_run / "todo.txt").write_text("train first\n")
    out = tmp_path / "out"
    args = ("experiments.export", f"--format={fmt}")
    assert_one_fatal_line(
        run(*args, f"--workdir={not_a_run}", f"--output_dir={out}"), "not a training workdir"
    )
    assert not out.exists()
    out.mkdir()
    assert_one_fatal_line(
        run(*args, f"--workdir={not_a_run}", f"--output_dir={out}"), "already exists", "--force"
    )
    assert list(out.iterdir()) == []


def test_ctranslate2_engine_on_a_directory_without_an_export(tmp_path):
    result = run("experiments.translate", "--engine=ctranslate2", f"--model_dir={tmp_path}")
    assert_one_fatal_line(result, "has no export.json", "--format=ctranslate2")
