"""Every config and data mistake on the train command line: one FATAL line, nothing built.

Each case runs the launcher in a subprocess from an empty directory, with the data and TFDS
directories pointed inside it: the directory must still be empty afterwards (no workdir, no
data prepared). The launcher fails before JAX compiles anything, so each case takes seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, last_fatal_line, subprocess_env
from transformer_jax.data import datasets

pytest_plugins = ["tests.conftest_data"]

CONFIG = f"--config={REPO / 'configs' / 'fra_eng.py'}"


def _fatal_line(tmp_path: Path, *flags: str, workdir: bool = True) -> str:
    """Runs the launcher from `tmp_path`; returns its one stderr line, checked to be FATAL."""
    args = [*flags, f"--config.data.data_dir={tmp_path / 'data'}"]  # after --config
    if workdir:
        args.append(f"--workdir={tmp_path / 'run'}")
    result = subprocess.run(
        [sys.executable, "-m", "experiments.train", *args],
        cwd=tmp_path,
        env={**subprocess_env(), "TFDS_DATA_DIR": str(tmp_path / "tfds")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0, result.stdout[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("FATAL: "), result.stderr[-3000:]
    assert list(tmp_path.iterdir()) == [], "the workdir or data was created before the error"
    return lines[0]


def test_unknown_dataset_name_names_it_and_the_choices(tmp_path):
    line = _fatal_line(tmp_path, f"{CONFIG}:runlocal", "--config.data.name=fra_eng2")
    assert "data.name='fra_eng2'" in line and "did you mean 'fra_eng'" in line
    assert "'wmt14_translate/de-en'" in line  # the catalogue form, with a config


def test_split_name_typo_names_the_split_and_the_choices(tmp_path):
    line = _fatal_line(tmp_path, f"{CONFIG}:runlocal", "--config.data.train_split=trian[:1000]")
    assert "data.train_split='trian[:1000]'" in line and "'trian'" in line
    assert "['train', 'validation', 'test', 'full']" in line


def test_bad_split_slice_names_it_and_the_syntax(tmp_path):
    line = _fatal_line(tmp_path, f"{CONFIG}:runlocal", "--config.data.eval_split=validation[:10")
    assert "data.eval_split='validation[:10'" in line
    assert "name[from:to]" in line and "'train[:1000]'" in line


def test_variant_typo_lists_each_variant_once(tmp_path):
    line = _fatal_line(tmp_path, f"{CONFIG}:smal")
    assert "'smal'" in line and "did you mean 'small'" in line
    assert "['default', 'd2l', 'deep_sampled', 'small', 'base', 'big', 'tiny']" in line
    assert line.count("'d2l'") == 1


def test_missing_config_file_names_it_and_the_shipped_configs(tmp_path):
    line = _fatal_line(tmp_path, "--config=configs/fra_eng_typo.py")
    assert "config file 'configs/fra_eng_typo.py' not found" in line
    assert "'fra_eng'" in line and "config_config" not in line


def test_missing_workdir_says_which_flag_and_gives_an_example(tmp_path):
    line = _fatal_line(tmp_path, f"{CONFIG}:runlocal", workdir=False)
    assert "--workdir is missing" in line and "e.g. --workdir=runs/fra_eng" in line


@pytest.mark.parametrize(
    "override, expected",
    [
        ("--config.model.num_heads=four", "model.num_heads takes an integer (now 2), got 'four'"),
        ("--config.learning_rate=fast", "learning_rate takes a number (now 0.005), got 'fast'"),
    ],
)
def test_non_number_for_a_numeric_key_names_the_key_and_the_type(tmp_path, override, expected):
    line = _fatal_line(tmp_path, f"{CONFIG}:runlocal", override)
    assert expected in line


def test_print_config_prints_the_resolved_config_and_builds_nothing(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.train", f"{CONFIG}:runlocal", "--print_config",
         "--config.model.num_heads=4", f"--config.data.data_dir={tmp_path / 'data'}"],
        cwd=tmp_path, env={**subprocess_env(), "TFDS_DATA_DIR": str(tmp_path / "tfds")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "num_heads: 4" in result.stdout and "train_split: train[:2000]" in result.stdout
    assert "model_dim: 16" in result.stdout  # the runlocal variant, resolved
    assert list(tmp_path.iterdir()) == []


def test_the_checks_read_both_flag_forms_and_the_last_config_wins():
    from transformer_jax import launch
    from transformer_jax.training.config import ConfigError

    with pytest.raises(ConfigError, match="config file 'missing.py' not found"):
        launch.check_config_args(["prog", "--config", "missing.py"])
    good = str(REPO / "configs" / "fra_eng.py")
    launch.check_config_args(["prog", "--config=missing.py", f"--config={good}:d2l"])
    with pytest.raises(ConfigError, match=r"model.ffn_dim takes an integer \(now 64\)"):
        launch.check_config_args(["prog", f"--config={good}:d2l", "--config.model.ffn_dim=1.5"])


def test_unreachable_corpus_mirror_is_one_fatal_line_naming_zip_path(tmp_path):
    """A first run with no local zip and the d2l mirror out of reach (here a closed local
    port): one FATAL line that names --config.data.zip_path (was a 196-line traceback)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.train",
            f"{CONFIG}:runlocal",
            f"--workdir={tmp_path / 'run'}",
            "--config.data.zip_path=",
            "--config.data.url=http://127.0.0.1:9/fra-eng.zip",  # the discard port: refused
            f"--config.data.data_dir={tmp_path / 'data'}",
        ],
        cwd=tmp_path,
        env={**subprocess_env(), "TFDS_DATA_DIR": str(tmp_path / "tfds")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("FATAL: download of http://127.0.0.1:9/fra-eng.zip failed"), last
    assert "--config.data.zip_path=/path/to/fra-eng.zip" in last
    assert not (tmp_path / "run").exists()  # nothing of the run was started


def _launch_on(cfg, zip_path, *flags: str) -> str:
    """The train launcher on a built small corpus; returns its last stderr line, a FATAL."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.train",
            f"{CONFIG}:runlocal",
            f"--workdir={Path(cfg.data_dir).parent / 'run'}",
            f"--config.data.zip_path={zip_path}",
            f"--config.data.data_dir={cfg.data_dir}",
            "--config.data.validation_fraction=0.2",
            "--config.data.test_fraction=0.2",
            *flags,
        ],
        cwd=Path(cfg.data_dir).parent,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return last_fatal_line(result)


def test_a_split_too_small_or_a_damaged_build_is_one_fatal_line(make_cfg, small_zip):
    """runlocal's train[:2000] of a 108-pair train split names the split and the sizes; a
    built split that cannot be read (bytes flipped in its shard) names the folder to delete."""
    cfg = make_cfg(small_zip)  # builds under tmp_path/tfds, 20 % validation and test
    datasets.load_split_pairs(cfg, "train")
    last = _launch_on(cfg, small_zip)
    assert "split 'train[:2000]' cannot be read from fra_eng" in last, last
    assert "its splits and sizes: train 108," in last, last
    folder = datasets.prepared_builder(cfg).data_path
    (shard,) = folder.glob("fra_eng-train.array_record*")
    data = bytearray(shard.read_bytes())
    data[200:400] = bytes(b ^ 0x5A for b in data[200:400])
    shard.write_bytes(bytes(data))
    last = _launch_on(cfg, small_zip, "--config.data.train_split=train")
    assert last.startswith(f"FATAL: the fra_eng dataset built in {folder} cannot be read"), last
    assert f"delete {folder} and run again" in last
