"""average_checkpoints writes only a new workdir: an existing --output_workdir with anything
in it (a CTranslate2 export had its config.json overwritten and checkpoints/ added) or a file
(was NotADirectoryError, and /etc/.hostname.partial/ left with a checkpoint in it) is one
FATAL line, and no staging folder is left behind on any failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, subprocess_env


def average(workdir: Path, output: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiments.average_checkpoints", f"--workdir={workdir}",
         "--last=2", f"--output_workdir={output}"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def contents(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_a_file_or_a_directory_with_files_is_refused_in_one_line(tiny_workdir, tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    (export / "config.json").write_text('{"add_source_bos": false}')
    (export / "model.bin").write_bytes(b"weights")
    hostname = tmp_path / "hostname"
    hostname.write_text("box\n")
    before = contents(tmp_path)
    for output, words in ((export, "already exists and is not empty"), (hostname, "is a file")):
        result = average(tiny_workdir, output)
        assert result.returncode == 2, result.stderr[-3000:]
        assert result.stderr.startswith("FATAL: ") and result.stderr.count("\n") == 1
        assert str(output) in result.stderr and words in result.stderr, result.stderr
    assert contents(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "hostname"]  # no .partial


def test_a_failed_write_leaves_no_staging_folder(tiny_workdir, tmp_path, monkeypatch):
    from transformer_jax.training.state import abstract_run_state
    from transformer_jax.workdir import averaging

    def full_disk(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(averaging.ckpt, "save_checkpoint", full_disk)
    with pytest.raises(OSError, match="No space"):
        averaging.write_averaged_checkpoint(
            tiny_workdir, 2, tmp_path / "avg", abstract_state=abstract_run_state(tiny_workdir)
        )
    assert list(tmp_path.iterdir()) == []
