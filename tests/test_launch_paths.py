"""`~` in a launcher's path flags is the home directory: bash leaves `--workdir=~/w` as it is,
and train then took its lock in ./~/w while orbax wrote the checkpoints in $HOME/w (two
trainers could share a workdir); translate's advice sent the user back to the same value."""

from __future__ import annotations

import subprocess
import sys

from absl import flags

from configs import fra_eng
from tests.helpers import one_fatal_line, subprocess_env
from transformer_jax import launch
from transformer_jax.workdir.checkpoints import save_config


def test_path_flags_and_each_run_of_an_ensemble_start_at_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    values = flags.FlagValues()
    flags.DEFINE_string("workdir", None, "", flag_values=values)
    flags.DEFINE_string("output_file", None, "", flag_values=values)
    flags.DEFINE_string("prefix", None, "", flag_values=values)  # text, not a path
    parse = launch.flags_parser(flag_values=values, module=__name__)
    parse(["prog", "--workdir=~/a,~/b@4, ~/c", "--output_file=~/out.txt", "--prefix=~ok"])
    assert values.workdir == f"{tmp_path}/a,{tmp_path}/b@4, {tmp_path}/c"
    assert values.output_file == f"{tmp_path}/out.txt"
    assert values.prefix == "~ok"
    parse(["prog", "--workdir=runs/a~b"])
    assert values.workdir == "runs/a~b"


def test_translate_reads_the_run_in_the_home_directory(tmp_path):
    (tmp_path / "run").mkdir()
    save_config(fra_eng.get_config("runlocal"), tmp_path / "run")
    result = subprocess.run(
        [sys.executable, "-m", "experiments.translate", "--workdir=~/run", "go ."],
        cwd=tmp_path, env={**subprocess_env(), "HOME": str(tmp_path)}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    fatal = one_fatal_line(result)
    assert f"{tmp_path}/run" in fatal and "~" not in fatal, fatal
    assert not (tmp_path / "~").exists()
