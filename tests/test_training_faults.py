"""Faults around the training run that the checkpoint tests do not cover (issue 39, round 2).

A kill while the first run saves its tokenizers, a run stopped before its first checkpoint
and restarted with another config, a config shorter than the run already is, a full disk
outside the checkpoint save (the metrics, the lock, config.json), and small ones: an
infinite learning rate, workdir entries of the wrong kind, the step a failed save names.
"""

from __future__ import annotations

import collections
import errno
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import REPO, one_fatal_line, subprocess_env
from tests.tiny_run import tiny_command, tiny_config
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir import history
from transformer_jax.workdir import lock as workdir_lock
from transformer_jax.workdir.directory import WorkdirError, WorkdirWriteError, check_workdir
from transformer_jax.workdir.resume import ConfigMismatchError, check_resume_config

needs_corpus = pytest.mark.skipif(
    not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"
)
FULL = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class Killed(Exception):
    """Stands for a kill -9 at that point."""


def train(workdir: Path, steps: int = 4, *, kill_at: int | None = None, config=None, **kwargs):
    """The tiny run in-process; with `kill_at`, it dies after that step, before logging or
    saving it."""
    from transformer_jax.training import train_and_evaluate

    def after_step(end):
        if end.step == kill_at:
            raise Killed
        return False

    config = config if config is not None else tiny_config(steps)
    return train_and_evaluate(config, workdir, after_step=after_step, **kwargs)


def launch(command: list[str], script: str) -> subprocess.CompletedProcess:
    """Runs the launcher command with `script` (Python) run first in the same process."""
    prelude = textwrap.dedent(script) + textwrap.dedent(
        """
        import runpy, sys
        sys.argv = ["experiments.train", *sys.argv[1:]]
        runpy.run_module("experiments.train", run_name="__main__")
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude, *command[3:]],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def messages(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


@pytest.fixture(scope="module")
def killed_before_the_first_checkpoint(tmp_path_factory) -> Path:
    """The tiny run killed after step 2, before it logged or saved it: the first checkpoint
    would have been step 2 (tests copy it)."""
    workdir = tmp_path_factory.mktemp("killed") / "run"
    with pytest.raises(Killed):
        train(workdir, kill_at=2)
    return workdir


def logged_copy(run: Path, tmp_path: Path, caplog) -> Path:
    """A copy of `run` at `tmp_path/run` for a test to change, with absl's INFO lines
    captured (`messages`)."""
    caplog.set_level(logging.INFO, logger="absl")
    workdir = tmp_path / "run"
    shutil.copytree(run, workdir)
    return workdir


# --- 1. the tokenizer save ------------------------------------------------------------------


def _word_pair():
    from transformer_jax.data.word_tokenizer import WordTokenizer

    source = WordTokenizer.train(["go home", "go now", "home now"], min_freq=1)
    target = WordTokenizer.train(["va", "va maintenant"], min_freq=1)
    return source, target


def test_a_tokenizer_save_killed_midway_leaves_no_folder(tmp_path, monkeypatch):
    from transformer_jax.data import load_tokenizers, save_tokenizers

    source, target = _word_pair()
    directory = tmp_path / "tokenizer"

    def killed(path):
        raise Killed

    monkeypatch.setattr(target, "save", killed)  # the source side is saved by then
    with pytest.raises(Killed):
        save_tokenizers(source, target, directory)
    assert not directory.exists()  # was: tokenizer/source/ whole, target/ missing
    monkeypatch.undo()

    save_tokenizers(source, target, directory)  # the next save clears what the kill left
    loaded = load_tokenizers(directory)
    assert [t.fingerprint for t in loaded] == [source.fingerprint, target.fingerprint]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer"]
    save_tokenizers(target, source, directory)  # and replaces a folder that is there
    assert load_tokenizers(directory)[0].fingerprint == target.fingerprint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer"]


@pytest.mark.slow
@needs_corpus
def test_a_tokenizer_cut_short_before_the_first_checkpoint_is_built_again(
    killed_before_the_first_checkpoint, tmp_path, caplog
):
    workdir = logged_copy(killed_before_the_first_checkpoint, tmp_path, caplog)
    (workdir / "tokenizer" / "source" / "tokenizer.json").unlink()  # as a kill -9 in the save
    train(workdir, steps=2)  # was: RunFileError, "copy the run's tokenizer/ back"
    assert "cannot be loaded" in messages(caplog)
    assert "no checkpoint uses it yet: building the tokenizers again" in messages(caplog)
    ckpt.load_workdir_tokenizers(workdir / "tokenizer")
    assert history.ever_checkpointed(workdir)

    (workdir / "tokenizer" / "source" / "tokenizer.json").unlink()  # now it is precious
    with pytest.raises(ckpt.RunFileError, match="copy the run's tokenizer/ back"):
        train(workdir, steps=2)


# --- 2. another config before the first checkpoint ----------------------------------------


def _saved_run(workdir: Path, *corrupt: str) -> Path:
    """A workdir with the tiny run's config.json and `corrupt` entries in
    checkpoints_corrupt/ (no training)."""
    workdir.mkdir(parents=True)
    ckpt.save_config(tiny_config(4), workdir)
    for name in corrupt:
        (workdir / ckpt.CORRUPT_DIR / name).mkdir(parents=True)
    return workdir


def test_a_changed_model_without_a_checkpoint_replaces_the_config(tmp_path):
    workdir = _saved_run(tmp_path / "run")
    config = tiny_config(4, model__model_dim=32)
    (change,) = check_resume_config(config, workdir)  # was: ConfigMismatchError, --init_from
    assert (change.key, change.kind) == ("model.model_dim", "replaced")


def test_a_changed_model_is_never_sent_to_an_init_from_without_checkpoints(tmp_path):
    workdir = _saved_run(tmp_path / "run", "2-1700000000")  # its checkpoints were all corrupt
    config = tiny_config(4, model__model_dim=32)
    with pytest.raises(ConfigMismatchError) as error:
        check_resume_config(config, workdir)
    message = str(error.value)
    assert "--init_from" not in message and "--restart_from_scratch" in message, message
    (change,) = check_resume_config(config, workdir, restart_from_scratch=True)
    assert change.kind == "replaced"

    (workdir / ckpt.CHECKPOINT_DIR / "4").mkdir(parents=True)  # a committed one: protected
    with pytest.raises(ConfigMismatchError, match="--init_from="):
        check_resume_config(config, workdir, restart_from_scratch=True)


@pytest.mark.slow
@needs_corpus
def test_a_run_stopped_before_its_first_checkpoint_restarts_with_another_config(
    killed_before_the_first_checkpoint, tmp_path, caplog
):
    workdir = logged_copy(killed_before_the_first_checkpoint, tmp_path, caplog)
    old_vocab = ckpt.load_workdir_tokenizers(workdir / "tokenizer")[0].vocab_size

    config = tiny_config(2, model__ffn_dim=64, data__min_freq=1)
    train(workdir, config=config)  # was: ConfigMismatchError pointing to --init_from=<workdir>
    text = messages(caplog)
    assert "has no checkpoint of its previous config, so the run starts afresh" in text
    assert "model.ffn_dim: 32 -> 64" in text and "data.min_freq: 2 -> 1" in text
    saved = ckpt.load_config(workdir)
    assert (saved.model.ffn_dim, saved.data.min_freq) == (64, 1)
    new_vocab = ckpt.load_workdir_tokenizers(workdir / "tokenizer")[0].vocab_size
    assert new_vocab > old_vocab  # built again for min_freq=1, not the old run's
    assert (workdir / history.PREVIOUS_DIR).is_dir()  # the old history, moved aside
    from transformer_jax.inference import Translator

    assert Translator.from_workdir(workdir).step == 2


# --- 3. a config shorter than the run ---------------------------------------------------------


@pytest.mark.slow
@needs_corpus
def test_a_shorter_or_changed_config_of_a_finished_run_is_not_recorded(
    tiny_workdir, tmp_path, caplog
):
    workdir = logged_copy(tiny_workdir, tmp_path, caplog)  # finished: `train(workdir, steps=4)`
    recorded = (workdir / "config.json").read_bytes()
    caplog.clear()

    train(workdir, steps=2)  # was: "at step 4 of 2", and config.json said 2
    text = messages(caplog)
    assert "already trained to step 4, past this config's 2 steps" in text, text
    assert "experiments.evaluate" in text and f"--workdir={workdir}" in text
    assert "Not recorded, as nothing is trained: num_train_steps: 4 -> 2" in text
    assert (workdir / "config.json").read_bytes() == recorded
    caplog.clear()

    config = tiny_config(4, learning_rate=0.5)
    train(workdir, config=config)  # finished: nothing remains to optimise differently
    text = messages(caplog)
    assert "optimised differently" not in text and "recorded in config.json" not in text, text
    assert "Nothing to train: the checkpoint of" in text and "at its last step, 4" in text
    assert (workdir / "config.json").read_bytes() == recorded


# --- 4. a full disk outside the checkpoint save ---------------------------------------------


def test_a_full_disk_at_the_lock_is_one_line(tmp_path, monkeypatch):
    def full(handle):
        raise FULL

    monkeypatch.setattr(workdir_lock, "_write", full)
    (tmp_path / "checkpoints" / "500").mkdir(parents=True)
    with pytest.raises(WorkdirWriteError) as error:  # was: OSError from os.pwrite
        with workdir_lock.hold(tmp_path):
            pass
    message = str(error.value)
    assert f"Writing {tmp_path / '.lock'} failed" in message and "No space left" in message
    assert "checkpoint 500 is intact" in message and "Free space on that disk" in message
    assert "re-run the same command to resume from step 500" in message
    assert not (tmp_path / ".lock").exists()


def test_a_full_disk_while_writing_metrics_is_reported_once(tmp_path, monkeypatch):
    from tensorboardX import SummaryWriter

    from transformer_jax.training.metrics import MetricWriter

    writer = MetricWriter(tmp_path)
    writer.write(1, "train", {"loss": 1.0})

    def full(self):
        raise FULL

    monkeypatch.setattr(SummaryWriter, "flush", full)
    with pytest.raises(WorkdirWriteError, match="metrics of step 2 .* No space left"):
        writer.write(2, "train", {"loss": 1.0})
    writer.close()  # was: the same OSError again
    assert [r["step"] for r in history.read_metrics(tmp_path)] == [1, 2]


def test_a_full_disk_while_resuming_leaves_metrics_jsonl_as_it_was(tmp_path, monkeypatch):
    lines = [json.dumps({"step": step, "split": "train"}) for step in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(f"{line}\n" for line in lines))
    (tmp_path / "checkpoints" / "2").mkdir(parents=True)
    write_text = Path.write_text

    def full(self, *args, **kwargs):
        write_text(self, "{", encoding="utf-8")  # a part written before the disk filled
        raise FULL

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(WorkdirWriteError, match="Rewriting .*metrics.jsonl failed"):
        history.truncate_metrics(tmp_path, 2)  # was: a raw OSError
    monkeypatch.undo()
    assert [r["step"] for r in history.read_metrics(tmp_path)] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "metrics.jsonl"]


@pytest.mark.slow
@needs_corpus
def test_a_full_disk_while_training_is_one_fatal_line_and_the_checkpoint_stays(tmp_path):
    from transformer_jax.inference import Translator

    workdir = tmp_path / "run"
    # tensorboardX's flush fails once the run has saved checkpoint 2, as on a full disk.
    script = """
        import errno, os
        from tensorboardX import SummaryWriter

        flush, calls = SummaryWriter.flush, []

        def full_disk(self):
            calls.append(1)
            if len(calls) > 4:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return flush(self)

        SummaryWriter.flush = full_disk
        """
    fatal = one_fatal_line(launch(tiny_command(workdir, 8), script))
    assert "No space left on device" in fatal and "metrics.jsonl" in fatal, fatal
    assert "checkpoint 2 is intact" in fatal and "resume from step 2" in fatal, fatal
    assert Translator.from_workdir(workdir).step == 2


@pytest.mark.slow
@needs_corpus
def test_a_full_disk_at_any_other_write_is_one_fatal_line(tmp_path):
    script = """
        import errno, os
        from transformer_jax.workdir import checkpoints

        def full_disk(config, workdir):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"{workdir}/config.json")

        checkpoints.save_config = full_disk
        """
    fatal = one_fatal_line(launch(tiny_command(tmp_path / "run", 2), script))
    assert "config.json failed" in fatal and "No space left on device" in fatal, fatal
    assert "Free space on that disk, then re-run the same command" in fatal, fatal


# --- 5. small ones -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [math.inf, math.nan, 0.0])
def test_a_learning_rate_that_is_not_finite_is_refused(value):
    from transformer_jax.training.config import ConfigError, validate_config

    config = tiny_config(4, learning_rate=value)
    with pytest.raises(ConfigError, match="learning_rate=.* must be a finite number > 0"):
        validate_config(config)


@pytest.mark.parametrize(("name", "make"), [("checkpoints", "file"), (".lock", "dir")])
def test_workdir_entries_of_the_wrong_kind_are_named(tmp_path, name, make):
    entry = tmp_path / name
    entry.mkdir() if make == "dir" else entry.write_text("x")
    with pytest.raises(WorkdirError, match=f"{entry} is a .*move it out of the workdir"):
        check_workdir(tmp_path)


class _FailingManager:
    """An orbax manager whose save of step 1000 fails in its thread (a full disk)."""

    directory = "/runs/x/checkpoints"

    def __init__(self):
        self.saved = []

    def save(self, step, args, force):
        self.saved.append(step)

    def is_saving_in_progress(self):
        return False

    def wait_until_finished(self):
        if self.saved:
            raise FULL

    def close(self):
        pass


def test_a_failed_save_names_its_own_step():
    from transformer_jax.workdir.checkpoint_saves import CheckpointSaveError, SaveWatch

    state = collections.namedtuple("State", "step params")(np.int32(1000), np.zeros(3))
    watch = SaveWatch(_FailingManager())
    try:
        watch.check(1000)
        watch.save(state, {"epoch": 0, "position": 0}, {})
        with pytest.raises(CheckpointSaveError) as error:
            watch.check(1001)  # the failure is seen after the next step
    finally:
        watch.close()
    message = str(error.value)
    assert "Saving checkpoint 1000 in" in message and "1001" not in message, message
    assert "No space left on device" in message
    json.dumps(message)  # one plain line


def test_the_event_loop_echoes_of_a_failed_save_are_dropped(monkeypatch):
    """orbax closes a failed save's event loop while tensorstore still finishes its other
    writes; each then raised "Event loop is closed" into sys.unraisablehook (270 tracebacks
    for the README model on a full disk)."""
    import types

    from transformer_jax.workdir.checkpoint_saves import CheckpointSaveError, SaveWatch

    def unraisable(error):
        return types.SimpleNamespace(
            exc_type=type(error), exc_value=error, exc_traceback=None, err_msg=None, object=None
        )

    shown = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: shown.append(str(u.exc_value)))
    state = collections.namedtuple("State", "step params")(np.int32(4), np.zeros(3))
    watch = SaveWatch(_FailingManager())
    try:
        watch.save(state, {"epoch": 0, "position": 0}, {})
        sys.unraisablehook(unraisable(RuntimeError("Event loop is closed")))
        sys.unraisablehook(unraisable(ValueError("something else")))
        with pytest.raises(CheckpointSaveError):
            watch.check(5)
    finally:
        watch.close()
    sys.unraisablehook(unraisable(RuntimeError("Event loop is closed")))  # stragglers too
    assert shown == ["something else"]

    def record(u):
        shown.append(str(u.exc_value))

    monkeypatch.setattr(sys, "unraisablehook", record)
    SaveWatch(_FailingManager()).close()  # a run whose saves all worked: the hook goes back
    assert sys.unraisablehook is record
