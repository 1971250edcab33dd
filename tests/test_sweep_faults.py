"""Faults of the sweep runner (transformer_jax/sweeps, experiments/sweep.py) and of the
`--workdir` reading its point directories need: a comma in a point's name, interrupts,
two sweeps on one folder, the results of resumed, failed and non-finite points, damaged
sweep files, --extra flags the train launcher does not take, an empty sweep."""

import shutil
from pathlib import Path

import pytest

from transformer_jax.inference.translator import split_workdirs
from transformer_jax.workdir.checkpoints import NoCheckpointError

# --- 1. a comma in a workdir's name -------------------------------------------------------


def test_a_directory_whose_name_has_commas_is_one_run_and_ensembles_still_work(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    for name in ("a", "b", "x=1,y=2", "x=1", "p,q", "q,r", "p", "r"):
        Path(name).mkdir()
    assert split_workdirs("x=1,y=2") == ["x=1,y=2"]  # commas and all
    assert split_workdirs("x=1,y=2@4") == ["x=1,y=2@4"]
    assert split_workdirs(Path("a,b")) == ["a,b"]  # code holding one workdir: never cut
    assert split_workdirs("a,b") == ["a", "b"] and split_workdirs(" a@2, b ") == ["a@2", "b"]
    assert split_workdirs("x=1,y=2,x=1,y=2@3") == ["x=1,y=2", "x=1,y=2@3"]  # two sweep points
    assert split_workdirs("x=1,y=2,a") == ["x=1,y=2", "a"]
    with pytest.raises(NoCheckpointError, match=r"--workdir=a,nope: no such directory, and as"):
        split_workdirs("a,nope")
    with pytest.raises(ValueError, match=r"reads two ways"):  # p + "q,r" or "p,q" + r
        split_workdirs("p,q,r")
    assert split_workdirs("p, q,r") == ["p", "q,r"]  # ", " separates


def test_a_run_in_a_workdir_with_commas_reports_translates_and_evaluates(tiny_workdir, tmp_path):
    from transformer_jax.evaluation.report import test_report
    from transformer_jax.evaluation.translate_cli import first_workdir
    from transformer_jax.inference import load_translator

    workdir = tmp_path / "norm_placement=pre,attention_kind=dot"
    shutil.copytree(tiny_workdir, workdir)
    assert first_workdir(str(workdir)) == str(workdir)
    assert load_translator(str(workdir)).translate(["go ."], beam_size=1)
    # The train launcher's closing report holds the --workdir string.
    report = test_report(str(workdir), 2)
    assert report["workdir"] == str(workdir) and (workdir / "eval_report.md").is_file()
