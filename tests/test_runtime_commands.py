"""Commands printed for pasting: the launcher as this install spells it, values shell-quoted."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from transformer_jax.runtime import commands
from transformer_jax.workdir import checkpoints as ckpt

REPO = Path(__file__).resolve().parents[1]
AWKWARD = "/tmp/runs/a b/it's $HOME ü"


def test_a_value_with_spaces_quotes_and_dollars_is_one_argument():
    line = commands.command("translate", workdir=AWKWARD, nbest=2)
    assert line.startswith("python -m experiments.translate ")  # the tests run in a checkout
    assert shlex.split(line)[-2:] == [f"--workdir={AWKWARD}", "--nbest=2"]
    assert commands.command("evaluate", workdir="runs/plain") == (
        "python -m experiments.evaluate --workdir=runs/plain"  # quoted only when needed
    )


def test_installed_commands_are_the_console_scripts_pyproject_declares(monkeypatch):
    monkeypatch.setattr(commands, "is_source_checkout", lambda: False)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for path in sorted((REPO / "experiments").glob("*.py")):
        if "def run()" not in path.read_text():
            continue  # a helper module, not a launcher
        name = commands.launcher(path.stem)
        assert name in scripts, f"{path.stem} -> {name}, not in [project.scripts]"
        assert scripts[name] == f"transformer_jax.experiments.{path.stem}:run"
    line = commands.train_command(AWKWARD)
    assert shlex.split(line) == [
        "transformer-jax-train",
        "--config=fra_eng",
        f"--workdir={AWKWARD}",
    ]


@pytest.mark.parametrize("installed", [False, True])
def test_the_train_hint_of_a_missing_workdir_pastes_whole(monkeypatch, tmp_path, installed):
    monkeypatch.setattr(commands, "is_source_checkout", lambda: not installed)
    workdir = tmp_path / "not a run $x"
    with pytest.raises(ckpt.NoCheckpointError) as raised:
        ckpt.load_config(workdir)
    hint = str(raised.value).split("Create one with: ", 1)[1]
    assert shlex.split(hint)[-1] == f"--workdir={workdir}"
    assert shlex.split(hint)[0] == ("transformer-jax-train" if installed else "python")


def test_a_finished_runs_closing_commands_paste_whole(tmp_path):
    from transformer_jax.evaluation.report import where_lines

    workdir = tmp_path / "my run (2)"
    lines = {
        line.split(":", 1)[0]: line.split(":", 1)[1]
        for line in where_lines(workdir, {"step": 5})
        if ":" in line
    }
    translate = shlex.split(lines["Translate"].split("|", 1)[1])
    assert translate[-1] == f"--workdir={workdir}"
    assert shlex.split(lines["TensorBoard"])[-1] == str(workdir / "tensorboard")


def test_a_run_without_checkpoints_is_sent_to_its_own_command(tmp_path):
    # Its config (any file, variant, overrides) is in its config.json: a shipped config's
    # train command would start another model in it.
    workdir = tmp_path / "mine"
    (workdir / "checkpoints").mkdir(parents=True)
    message = ckpt._no_checkpoint_message(workdir / "checkpoints", workdir)
    assert "re-running the command that made" in message and "config.json" in message
    assert "configs/fra_eng.py" not in message and "--config=" not in message


def test_a_run_that_lost_its_config_is_not_called_a_non_run(tmp_path):
    workdir = tmp_path / "run"
    (workdir / "checkpoints" / "100").mkdir(parents=True)
    with pytest.raises(ckpt.NoCheckpointError) as raised:
        ckpt.load_config(workdir)
    said = str(raised.value)
    assert "has checkpoints but no config.json" in said and "not a training workdir" not in said
