"""experiments.export and translate --engine=ctranslate2 refuse what they cannot do in one
FATAL line (exit 2, no traceback, nothing written): a directory that holds no run, an
--output_dir that exists, a --model_dir that holds no CTranslate2 export. The CTranslate2
engine on a StableHLO export is in tests/test_export_stablehlo.py (it needs one)."""

from __future__ import annotations

import pytest

from tests.helpers import only_fatal_line, run_module

pytest.importorskip("ctranslate2")
pytest.importorskip("flatbuffers")


@pytest.mark.parametrize("fmt", ["ctranslate2", "stablehlo"])
def test_export_refusals_are_one_fatal_line(fmt, tmp_path):
    not_a_run = tmp_path / "notes"
    not_a_run.mkdir()
    (not_a_run / "todo.txt").write_text("train first\n")
    out = tmp_path / "out"
    args = ("experiments.export", f"--format={fmt}")
    only_fatal_line(
        run_module(*args, f"--workdir={not_a_run}", f"--output_dir={out}"), "not a training workdir"
    )
    assert not out.exists()
    out.mkdir()
    only_fatal_line(
        run_module(*args, f"--workdir={not_a_run}", f"--output_dir={out}"),
        "already exists",
        "--force",
    )
    assert list(out.iterdir()) == []


def test_ctranslate2_engine_on_a_directory_without_an_export(tmp_path):
    result = run_module("experiments.translate", "--engine=ctranslate2", f"--model_dir={tmp_path}")
    only_fatal_line(result, "has no export.json", "--format=ctranslate2")
