"""Faults of the data a user meets: a damaged build, a zip that is not there, a corpus too
small, relative paths, a full disk. Each is one error naming what to do, which the launchers
print as one FATAL line (train: `experiments/train.py`; evaluate: `experiments/evaluate.py`).
"""

from __future__ import annotations

import errno
import json
import logging
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.helpers import REPO, last_fatal_line, subprocess_env
from transformer_jax.data import config as config_lib
from transformer_jax.data import datasets, download
from transformer_jax.data.corpus import CorruptArchiveError

pytest_plugins = ["tests.conftest_data"]

CONFIG = f"--config={REPO / 'configs' / 'fra_eng.py'}:runlocal"
CLOSED_PORT_URL = "http://127.0.0.1:9/fra-eng.zip"  # the discard port: refused at once


def _last_stderr_line(args: list[str], cwd: Path) -> str:
    """Runs `python -m <args>` from `cwd`; returns its last stderr line, checked to be the one
    FATAL line of a clean exit 2 (no traceback)."""
    result = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        env={**subprocess_env(), "TFDS_DATA_DIR": str(cwd / "tfds_default")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return last_fatal_line(result)


# -- a damaged build: its info files ---------------------------------------------------------


def _damage(folder: Path, how: str) -> None:
    info, metadata = folder / "dataset_info.json", folder / "metadata.json"
    if how == "dataset_info.json deleted":
        info.unlink()
    elif how == "dataset_info.json garbage":
        info.write_text("garbage{")
    elif how == "dataset_info.json emptied":
        info.write_text("")
    elif how == "dataset_info.json without splits":
        text = json.loads(info.read_text())
        del text["splits"]
        info.write_text(json.dumps(text))
    elif how == "metadata.json garbage":
        metadata.write_text("garbage{")


@pytest.mark.parametrize(
    "how",
    [
        "dataset_info.json deleted",
        "dataset_info.json garbage",
        "dataset_info.json emptied",
        "dataset_info.json without splits",
        "metadata.json garbage",
    ],
)
def test_damaged_info_files_are_the_damaged_build_error_and_a_rebuild_fixes_them(
    make_cfg, small_zip, how
):
    """Was a KeyError ("splits is empty"), protobuf's ParseError or a JSONDecodeError; now the
    message of a damaged split file, naming the folder to delete."""
    cfg = make_cfg(small_zip)
    pairs = datasets.load_split_pairs(cfg, "train")
    folder = datasets.prepared_builder(cfg).data_path
    assert Path(folder) == datasets.build_dir(cfg)  # named without opening the build
    _damage(Path(folder), how)
    with pytest.raises(datasets.DatasetReadError) as raised:
        datasets.load_split_pairs(cfg, "train[:20]")
    message = str(raised.value)
    assert f"the fra_eng dataset built in {folder} cannot be read" in message
    assert f"delete {folder} and run again to rebuild it from the corpus" in message
    shutil.rmtree(folder)  # the advice works
    assert datasets.load_split_pairs(cfg, "train") == pairs


def test_a_build_killed_midway_leaves_nothing_behind_the_next_build(make_cfg, small_zip):
    """TFDS removes its incomplete.* folder when a build fails, not when the process is
    killed: each kill left one (up to a whole build's size) for good."""
    cfg = make_cfg(small_zip)
    parent = datasets.build_dir(cfg).parent
    stale = parent / "incomplete.AB12CD_1.0.0"  # what a build killed with SIGKILL leaves
    (stale / "fra_eng-train.array_record-00000-of-00001").parent.mkdir(parents=True)
    (stale / "fra_eng-train.array_record-00000-of-00001").write_bytes(b"half")
    assert datasets.load_split_pairs(cfg, "train")
    assert not stale.exists() and not list(parent.glob("incomplete.*"))
    assert datasets.build_dir(cfg).is_dir()


def test_a_catalogue_build_whose_info_lists_no_splits_is_damaged(tmp_path):
    """Another TFDS dataset: the KeyError of a build without dataset_info.json names the
    folder too (a split the info lacks among others stays the caller's SplitError)."""

    class Emptied:
        name, data_path = "ted_hrlr_translate", tmp_path / "ted" / "1.0.0"
        info = types.SimpleNamespace(splits={})

        def as_data_source(self, split, **kwargs):
            raise KeyError("Trying to access `splits['train']` but `splits` is empty.")

    cfg = config_lib.data_config()
    cfg.name = "ted_hrlr_translate/pt_to_en"
    with pytest.raises(datasets.DatasetReadError, match=f"delete {tmp_path / 'ted' / '1.0.0'}"):
        datasets._data_source(Emptied(), cfg, "train")


# -- data.zip_path that is not a file --------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "a directory"])
def test_a_given_zip_path_that_is_not_a_file_is_named_before_any_download(
    tmp_path, make_cfg, monkeypatch, kind
):
    """Was a silent fall-back to the download, whose failure then asked for the zip_path the
    user had given."""
    given = tmp_path / "nonexist.zip"
    if kind == "a directory":
        given.mkdir()

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded although data.zip_path was given")

    monkeypatch.setattr(download, "download", no_download)
    cfg = make_cfg(given, url=CLOSED_PORT_URL)
    with pytest.raises(download.ZipNotFoundError) as raised:
        datasets.load_split_pairs(cfg, "train")
    message = str(raised.value)
    what = "is a directory, not a file" if kind == "a directory" else "does not exist"
    assert message.startswith(f"data.zip_path={given} {what}. "), message
    assert "--config.data.zip_path=/path/to/fra-eng.zip" in message
    assert not (tmp_path / "tfds" / "fra_eng").exists()  # refused before TFDS starts a build


def test_a_relative_zip_path_that_is_not_there_says_where_it_was_read_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(download.ZipNotFoundError) as raised:
        download.locate_zip(
            zip_path="data/fra-eng.zip", manual_dir=None, download_dir=tmp_path, url=""
        )
    assert str(raised.value).startswith(
        f"data.zip_path=data/fra-eng.zip (a relative path, read from {tmp_path}) does not exist."
    )


def test_a_built_dataset_is_read_without_its_zip_with_a_warning_naming_it(
    tmp_path, make_cfg, small_zip, caplog
):
    """A built dataset needs no zip (evaluate on another machine), but a zip_path that is not
    there is named, with the zip the build came from."""
    cfg = make_cfg(small_zip)
    pairs = datasets.load_split_pairs(cfg, "train")
    cfg.zip_path = str(tmp_path / "moved.zip")
    with caplog.at_level(logging.WARNING):
        assert datasets.load_split_pairs(cfg, "train") == pairs
    assert f"data.zip_path={tmp_path / 'moved.zip'} is not a file" in caplog.text
    assert download.file_digests(small_zip)["sha256"] in caplog.text


# -- a corpus too small ----------------------------------------------------------------------


def test_a_corpus_too_small_is_a_corpus_error_and_one_fatal_line_from_train(tmp_path, make_zip):
    """Was a ValueError the train launcher did not catch: a traceback, exit 1."""
    zip_path = make_zip(tmp_path / "tiny.zip", ["Go.\tVa !", "Hi.\tSalut !"])
    cfg = config_lib.data_config()
    cfg.update(zip_path=str(zip_path), url="", data_dir=str(tmp_path / "tfds"))
    with pytest.raises(CorruptArchiveError, match=r"split '\w+' would be empty \(2 pairs read"):
        datasets.load_split_pairs(cfg, "train")
    assert not datasets.build_dir(cfg).exists()  # nothing half-built is left
    last = _last_stderr_line(
        [
            "experiments.train",
            CONFIG,
            f"--workdir={tmp_path / 'run'}",
            f"--config.data.zip_path={zip_path}",
            f"--config.data.data_dir={tmp_path / 'tfds'}",
        ],
        tmp_path,
    )
    assert "would be empty (2 pairs read" in last and "--config.data.zip_path=" in last


# -- relative paths --------------------------------------------------------------------------


def test_relative_data_paths_are_made_absolute_when_the_config_is_checked(tmp_path, monkeypatch):
    """The run config train records (config.json) names its data from any directory; "" and
    a URL stay as they are."""
    from configs import fra_eng
    from transformer_jax.training import validate_config

    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    config = fra_eng.get_config("runlocal")
    config.data.data_dir, config.data.zip_path = "../tfds", "~/corpora/fra-eng.zip"
    validate_config(config)
    assert config.data.data_dir == str(tmp_path / "tfds")
    assert config.data.zip_path == str(Path("~/corpora/fra-eng.zip").expanduser())
    cfg = config_lib.data_config()
    cfg.data_dir, cfg.zip_path = "gs://bucket/tfds", ""
    config_lib.validate_data_config(cfg)
    assert (cfg.data_dir, cfg.zip_path) == ("gs://bucket/tfds", "")


def test_the_pipeline_makes_a_direct_callers_relative_paths_absolute(
    tmp_path, make_cfg, small_zip, monkeypatch
):
    from transformer_jax.data import create_input_pipeline

    monkeypatch.chdir(tmp_path)
    cfg = make_cfg("fra-eng.zip", data_dir="tfds")
    create_input_pipeline(cfg)
    assert (cfg.data_dir, cfg.zip_path) == (str(tmp_path / "tfds"), str(small_zip))


@pytest.mark.parametrize(
    "zip_path, url, expected",
    [
        ("data/fra-eng.zip", CLOSED_PORT_URL, "FATAL: data.zip_path=data/fra-eng.zip (a relative"),
        ("", CLOSED_PORT_URL, f"FATAL: download of {CLOSED_PORT_URL} failed"),
    ],
)
def test_evaluate_gives_the_data_errors_as_one_fatal_line(tmp_path, zip_path, url, expected):
    """A workdir recorded with a relative zip_path, evaluated from another directory, or a
    corpus that cannot be downloaded: evaluate caught neither ZipNotFoundError nor
    DownloadError (tracebacks). The data are read before any checkpoint, so a config.json
    is workdir enough."""
    from configs import fra_eng
    from transformer_jax.workdir.checkpoints import save_config

    config = fra_eng.get_config("runlocal")
    config.data.update(zip_path=zip_path, url=url, data_dir=str(tmp_path / "tfds"))
    (tmp_path / "run").mkdir()
    save_config(config, tmp_path / "run")
    last = _last_stderr_line(["experiments.evaluate", f"--workdir={tmp_path / 'run'}"], tmp_path)
    assert last.startswith(expected), last


# -- a full disk -----------------------------------------------------------------------------


class _FullDiskWriter:
    """array_record's writer on a full disk: the records go nowhere, closing fails."""

    error: Exception

    def __init__(self, path, options):
        pass

    def write(self, record):
        pass

    def close(self):
        raise self.error


@pytest.mark.parametrize(
    "error",
    [  # as array_record reports it (the tester's RuntimeError), and as an OSError
        RuntimeError("DATA_LOSS: Failed to write: No space left on device [28]"),
        OSError(errno.ENOSPC, "No space left on device"),
    ],
)
def test_a_full_disk_while_building_is_one_error_naming_data_dir(
    make_cfg, small_zip, monkeypatch, error
):
    """Was TFDS's `RuntimeError: Failed to finalize writing of split ...` traceback."""
    from tensorflow_datasets.core import file_adapters

    cfg = make_cfg(small_zip)
    writer = type("Writer", (_FullDiskWriter,), {"error": error})
    with monkeypatch.context() as patch:
        # The module, not its attribute: TFDS imports array_record lazily, through a proxy.
        full_disk = types.SimpleNamespace(ArrayRecordWriter=writer)
        patch.setattr(file_adapters, "array_record_module", full_disk)
        with pytest.raises(datasets.DatasetReadError) as raised:
            datasets.load_split_pairs(cfg, "train")
    message = str(raised.value)
    assert message.startswith(
        f"building the fra_eng dataset in data.data_dir={cfg.data_dir} failed: the disk is full"
    ), message
    assert "Free space there, or point data.data_dir at a disk with room" in message
    assert not datasets.build_dir(cfg).exists()  # TFDS removed its partial build
    assert len(datasets.load_split_pairs(cfg, "train")) > 0  # with room, the same call builds


def test_a_full_disk_while_writing_a_report_keeps_the_old_files_whole(tmp_path, monkeypatch):
    """Was an OSError traceback after the decoding, leaving an empty eval_test_n20.json."""
    from transformer_jax.evaluation import report as report_lib

    monkeypatch.setattr(report_lib, "format_report", lambda report: f"# {report['bleu']}\n")
    old = {"bleu": 1.0}
    report_lib.write_report(old, tmp_path, tmp_path, "eval_test_n20")
    json_path, md_path = report_lib.report_paths(tmp_path, "eval_test_n20")
    before = json_path.read_text(), md_path.read_text()
    real_write_text = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        real_write_text(self, text[: len(text) // 2], *args, **kwargs)  # part of it, then full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    new = {"bleu": 2.0}
    with pytest.raises(report_lib.ReportWriteError) as raised:
        report_lib.write_report(new, tmp_path, tmp_path, "eval_test_n20")
    assert (json_path.read_text(), md_path.read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_test_n20.json", "eval_test_n20.md"]
    assert raised.value.report is new  # the launcher still shows what it scored
    message = str(raised.value)
    assert f"cannot be written into {tmp_path} (" in message and "No space left" in message
    assert "--report_dir=DIR" in message


def test_a_report_that_cannot_be_written_is_still_printed(monkeypatch, capsys):
    """A training launch's closing report on a full disk: the scores on stdout, then the
    error (which the train launcher makes one FATAL line)."""
    from transformer_jax.evaluation import report as report_lib

    scored = {
        "bleu": 37.5, "chrf": 57.0, "split": "test", "beam_size": 4, "bleu_signature": "s",
        "chrf_signature": "c", "bleu_by_length": [], "num_sentences": 3,
    }  # fmt: skip

    def unwritable(workdir, num_examples):
        raise report_lib.ReportWriteError("cannot be written into W (disk full)", scored)

    monkeypatch.setattr(report_lib, "evaluate_workdir", unwritable)
    with pytest.raises(report_lib.ReportWriteError, match="cannot be written"):
        report_lib.test_report("W", 100)
    assert capsys.readouterr().out.startswith("BLEU 37.50  chrF 57.00  on test, beam 4")
