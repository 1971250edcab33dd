"""workdir.config_renames: a config written with an old name still loads, validates, resumes
(and an export's manifest with an old key still reads)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from configs import fra_eng
from tests.helpers import REPO, subprocess_env
from transformer_jax.export.ct2_translate import read_manifest
from transformer_jax.export.ctranslate2 import MANIFEST
from transformer_jax.inference.settings import decode_settings
from transformer_jax.training.config import validate_config
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir.config_renames import upgrade_saved
from transformer_jax.workdir.resume import check_resume_config


def _old_workdir(tmp_path, **old_values):
    """A workdir whose config.json holds `old_values` (names of an earlier release)."""
    values = fra_eng.get_config("runlocal").to_dict()
    values.update(old_values)
    (tmp_path / ckpt.CONFIG_FILE).write_text(json.dumps(values))
    return tmp_path


def test_a_saved_tuned_gradients_loads_as_custom_vjp_and_resumes_unchanged(tmp_path):
    workdir = _old_workdir(tmp_path, gradients="tuned")
    assert ckpt.load_config(workdir).gradients == "custom_vjp"
    assert json.loads((workdir / ckpt.CONFIG_FILE).read_text())["gradients"] == "tuned"
    config = fra_eng.get_config("runlocal")
    config.gradients = "custom_vjp"
    assert check_resume_config(config, workdir) == []  # the same rule: no change to record
    config.gradients = "autodiff"
    assert [str(c) for c in check_resume_config(config, workdir)] == [
        "gradients: 'custom_vjp' -> 'autodiff'"
    ]


def test_upgrade_saved_leaves_new_names_and_its_argument_alone():
    saved = {"gradients": "tuned", "eval": {"beam_size": 4}}
    assert upgrade_saved(saved) == {"gradients": "custom_vjp", "eval": {"beam_size": 4}}
    assert saved["gradients"] == "tuned"
    for value in ("auto", "autodiff", "custom_vjp"):
        assert upgrade_saved({"gradients": value}) == {"gradients": value}


def test_validate_config_maps_tuned_to_custom_vjp_with_one_note(caplog):
    config = fra_eng.get_config("runlocal")
    config.gradients = "tuned"
    with caplog.at_level(logging.WARNING):
        validate_config(config)
    assert config.gradients == "custom_vjp"
    notes = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert notes == [
        "gradients='tuned' is deprecated: it is now gradients='custom_vjp' (the same rule)."
    ]


def test_the_train_launcher_accepts_tuned_with_a_note_on_stderr(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.train",
         f"--config={REPO / 'configs' / 'fra_eng.py'}:runlocal", "--print_config",
         "--config.gradients=tuned", f"--config.data.data_dir={tmp_path / 'data'}"],
        cwd=tmp_path, env={**subprocess_env(), "TFDS_DATA_DIR": str(tmp_path / "tfds")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gradients: custom_vjp" in result.stdout
    notes = [line for line in result.stderr.splitlines() if "deprecated" in line]
    assert len(notes) == 1 and "gradients='custom_vjp'" in notes[0], result.stderr[-3000:]


def test_a_saved_split_len_loads_as_segment_len_and_decodes_with_it(tmp_path):
    eval_section = fra_eng.get_config("runlocal").eval.to_dict()
    del eval_section["segment_len"]  # the run's default is 1: sentence by sentence
    eval_section["split_len"] = 0  # every input whole
    workdir = _old_workdir(tmp_path, eval=eval_section)
    loaded = ckpt.load_config(workdir)
    assert loaded.eval.segment_len == 0 and "split_len" not in loaded.eval
    assert decode_settings(loaded)["segment_len"] == 0  # the run's setting, not the default
    config = fra_eng.get_config("runlocal")
    config.eval.segment_len = 0
    assert check_resume_config(config, workdir) == []


def test_an_old_export_manifest_reads_split_len_as_segment_len(tmp_path):
    manifest = {"format": "ctranslate2", "decoding": {"beam_size": 4, "split_len": 0}}
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    assert read_manifest(tmp_path)["decoding"] == {"beam_size": 4, "segment_len": 0}
