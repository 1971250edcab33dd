"""Exports never destroy what they did not write, and a damaged export is one clear line.

- `--force` replaces only an earlier export (it has export.json) or an empty directory:
  `--output_dir=` the workdir, a directory holding it, another training run, a file or a
  directory no export wrote are refused (`--force` once deleted the whole run);
- an export's files are checked when it is opened (present, sha256 as exported, and
  CTranslate2's own load errors): a `DamagedExportError` naming the directory and the command
  that writes it again, one FATAL line in translate (was a traceback, or a silent
  translation by a model.bin with 2 KB overwritten);
- `--quantization=bfloat16` without torch, and `--quantization` with `--format=stablehlo`,
  are one FATAL line, nothing written;
- an export directory gets a normal directory's mode (StableHLO's were 0700).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, only_fatal_line, run_module, subprocess_env
from transformer_jax.data.vocab import SPECIAL_TOKENS
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.export.manifest import DamagedExportError
from transformer_jax.export.staging import check_new, staged_dir
from transformer_jax.inference import Translator
from transformer_jax.testing import random_params, tiny_config

SOURCE = WordTokenizer([*SPECIAL_TOKENS, "go", ".", "run"])
TARGET = WordTokenizer([*SPECIAL_TOKENS, "va", "!", "cours"])  # another: target_vocabulary.json


def fake_run(path: Path) -> Path:
    """A directory shaped like a training run: config.json and a checkpoint."""
    (path / "checkpoints" / "100").mkdir(parents=True)
    (path / "checkpoints" / "100" / "state").write_text("weights")
    (path / "config.json").write_text("{}")
    (path / "metrics.jsonl").write_text("{}\n")
    return path


def contents(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): p.read_text() for p in path.rglob("*") if p.is_file()}


def model() -> Translator:
    cfg = tiny_config(SOURCE.vocab_size, TARGET.vocab_size)
    return Translator.from_params(cfg, random_params(cfg, seed=0), SOURCE, TARGET)


# --- --force replaces only an earlier export or an empty directory ------------------------


def test_force_refuses_the_workdir_a_parent_of_it_another_run_a_file(tmp_path):
    run_dir = fake_run(tmp_path / "runs" / "fra_eng")
    before = contents(tmp_path)
    refusals = {
        run_dir: "is the training run being exported",
        tmp_path / "runs": "contains the training run being exported",
        tmp_path: "contains the training run being exported",
    }
    for out, words in refusals.items():
        with pytest.raises(FileExistsError, match=words) as error:
            with staged_dir(out, force=True, workdir=run_dir) as tmp:
                (tmp / "model.bin").write_text("new")
        assert str(out) in str(error.value)
    # Without being told which run is exported: a run, or a folder no export wrote.
    with pytest.raises(FileExistsError, match="is a training run"):
        check_new(run_dir, True)
    with pytest.raises(FileExistsError, match="is not an earlier export"):
        check_new(tmp_path / "runs", True)
    # An "export" with a run inside it is no export to replace.
    hidden = tmp_path / "old_export"
    fake_run(hidden / "inner_run")
    (hidden / "export.json").write_text("{}")
    with pytest.raises(FileExistsError, match="holds a training run"):
        check_new(hidden, True)
    shutil.rmtree(hidden)
    # A file, with or without --force: never replaced.
    note = tmp_path / "notes.txt"
    note.write_text("mine")
    for force in (False, True):
        with pytest.raises(FileExistsError, match="is a file, not a directory"):
            check_new(note, force)
    note.unlink()
    assert contents(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # no temporary siblings


def test_force_replaces_an_earlier_export_or_an_empty_directory(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with staged_dir(empty, force=True) as tmp:
        (tmp / "export.json").write_text('{"format": "ctranslate2"}')
    with staged_dir(empty, force=True) as tmp:  # now an earlier export
        (tmp / "export.json").write_text('{"format": "stablehlo"}')
    assert json.loads((empty / "export.json").read_text()) == {"format": "stablehlo"}
    with pytest.raises(FileExistsError, match="already exists; .* --force"):
        check_new(empty, False)


def test_export_cli_refuses_the_workdir_with_force_and_keeps_it(tmp_path):
    """Was: the run (checkpoints, metrics) deleted, the export written in its place, exit 0."""
    run_dir = fake_run(tmp_path / "run")
    before = contents(run_dir)
    result = run_module(
        "experiments.export", f"--workdir={run_dir}", f"--output_dir={run_dir}", "--force"
    )
    only_fatal_line(result, f"--output_dir={run_dir}", "training run being exported")
    assert contents(run_dir) == before and sorted(os.listdir(tmp_path)) == ["run"]


def test_an_export_directory_has_a_normal_directory_mode(tmp_path):
    """mkdtemp's 0700 was renamed into place: a serving account could not read StableHLO
    exports (CTranslate2's converter remakes its folder, so those were 0755)."""
    umask = os.umask(0o022)
    try:
        with staged_dir(tmp_path / "hlo") as tmp:
            (tmp / "export.json").write_text("{}")
        assert (tmp_path / "hlo").stat().st_mode & 0o777 == 0o755
        os.umask(0o027)
        with staged_dir(tmp_path / "group") as tmp:
            pass
        assert (tmp_path / "group").stat().st_mode & 0o777 == 0o750  # the umask is respected
    finally:
        os.umask(umask)


def test_quantization_with_stablehlo_is_one_fatal_line(tmp_path):
    result = run_module(
        "experiments.export", "--format=stablehlo", "--quantization=int8",
        f"--workdir={tmp_path}", f"--output_dir={tmp_path / 'out'}",
    )  # fmt: skip
    only_fatal_line(result, "--quantization applies to --format=ctranslate2 only")
    assert "USAGE" not in result.stderr and not (tmp_path / "out").exists()


# --- CTranslate2 exports: bfloat16, damage ------------------------------------------------

ctranslate2_needed = pytest.mark.skipif(
    __import__("importlib").util.find_spec("ctranslate2") is None, reason="needs ctranslate2"
)


@ctranslate2_needed
def test_bfloat16_without_torch_names_torch_and_writes_nothing(tmp_path):
    from transformer_jax.export import convert
    from transformer_jax.export.extras import MissingExtraError

    if __import__("importlib").util.find_spec("torch") is not None:
        pytest.skip("torch is installed: bfloat16 converts")
    with pytest.raises(MissingExtraError, match="bfloat16 needs torch.*pip install torch"):
        convert(model(), tmp_path / "bf16", quantization="bfloat16")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A random-initialised model exported to CTranslate2 (separate source and target
    vocabularies), copied by each test before it damages it."""
    from transformer_jax.export import convert

    path = tmp_path_factory.mktemp("ct2") / "model"
    convert(model(), path)
    return path


def _overwrite_2kb(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2048] = bytes(2048)
    path.write_bytes(bytes(data))


def _without_digests(path: Path) -> None:
    manifest = json.loads((path / "export.json").read_text())
    del manifest["sha256"]
    (path / "export.json").write_text(json.dumps(manifest))


DAMAGE = {
    "model.bin deleted": (lambda d: (d / "model.bin").unlink(), "missing model.bin"),
    "model.bin truncated": (
        lambda d: os.truncate(d / "model.bin", 1000),
        "model.bin is not the file that was exported",
    ),
    "model.bin 2 KB overwritten": (
        lambda d: _overwrite_2kb(d / "model.bin"),
        "model.bin is not the file that was exported",
    ),
    "config.json deleted": (lambda d: (d / "config.json").unlink(), "missing config.json"),
    "target vocabulary deleted": (
        lambda d: (d / "target_vocabulary.json").unlink(),
        "target_vocabulary.json",
    ),
    "tokenizer deleted": (
        lambda d: shutil.rmtree(d / "tokenizer" / "target"),
        "missing tokenizer/target",
    ),
    "export.json not JSON": (
        lambda d: (d / "export.json").write_text("{"),
        "export.json is not valid JSON",
    ),
    "export.json empty": (
        lambda d: (d / "export.json").write_text("{}"),
        "export.json names no export format",
    ),
    # An export from before digests: CTranslate2's own error, as one line.
    "older export truncated": (
        lambda d: (_without_digests(d), os.truncate(d / "model.bin", 1000)),
        "CTranslate2 cannot load it: ",
    ),
}


@ctranslate2_needed
@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_export_is_named_when_opened(exported, tmp_path, case):
    from transformer_jax.export.ct2_translate import open_translator, translate_lines

    damage, words = DAMAGE[case]
    model_dir = tmp_path / "model"
    shutil.copytree(exported, model_dir)
    damage(model_dir)
    for opening in (
        lambda: open_translator(model_dir),
        lambda: translate_lines(model_dir, ["go ."]),
    ):
        with pytest.raises(DamagedExportError) as error:
            opening()
        message = str(error.value)
        assert message.startswith(f"{model_dir} is a damaged export (") and words in message
        assert f"--output_dir={model_dir} --force`" in message and "experiments.export" in message


@ctranslate2_needed
def test_digests_are_recorded_and_an_older_export_still_opens(exported, tmp_path):
    from transformer_jax.export.ct2_translate import translate_lines
    from transformer_jax.export.manifest import file_sha256

    manifest = json.loads((exported / "export.json").read_text())
    digests = manifest["sha256"]
    assert {"model.bin", "config.json", "target_vocabulary.json"} <= set(digests)
    assert "export.json" not in digests and "tokenizer/target/vocab.txt" in digests
    assert digests["model.bin"] == file_sha256(exported / "model.bin")
    want = translate_lines(exported, ["go .", "run"], max_decode_len=4)
    older = tmp_path / "older"
    shutil.copytree(exported, older)
    _without_digests(older)
    assert translate_lines(older, ["go .", "run"], max_decode_len=4) == want


@ctranslate2_needed
def test_translate_on_a_damaged_export_is_one_fatal_line(exported, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(exported, model_dir)
    (model_dir / "model.bin").unlink()
    result = run_module("experiments.translate", "--engine=ctranslate2", f"--model_dir={model_dir}")
    only_fatal_line(result, f"{model_dir} is a damaged export", "export it again")
    assert "Traceback" not in result.stderr and result.stdout == ""


@ctranslate2_needed
def test_serve_on_a_damaged_export_is_one_fatal_line(exported, tmp_path):
    # The server's CTranslate2 engine opens an export as translate does (its digests checked).
    model_dir = tmp_path / "model"
    shutil.copytree(exported, model_dir)
    _overwrite_2kb(model_dir / "model.bin")
    # Before, it served the damaged weights (and ran until killed): a short limit.
    result = subprocess.run(
        [sys.executable, "-m", "experiments.serve", "--engine=ctranslate2",
         f"--model_dir={model_dir}", "--port=0"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    only_fatal_line(result, f"{model_dir} is a damaged export", "export it again")
