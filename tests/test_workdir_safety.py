"""A workdir is never lost (issue 19): each fault injected into a tiny run's workdir.

Verified restores (bytes flipped in a checkpoint, every checkpoint corrupt), guarded resumes
(a changed model key is refused before anything is written; a changed step count is
accepted and recorded), one history after kills, fine-tunes with `init_from`, and one-line
workdir errors. The runs are the tiny `runlocal` model on 500 pairs, a few steps each.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import tiny_run
from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.inference import Translator
from transformer_jax.training.config import run_defaults
from transformer_jax.training.finetune import InitFromError
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir import history
from transformer_jax.workdir.directory import WorkdirError, check_workdir
from transformer_jax.workdir.resume import ConfigMismatchError, config_changes
from transformer_jax.workdir.state_checks import (
    CorruptCheckpointError,
    check_restored,
    leaf_digests,
)

needs_corpus = pytest.mark.skipif(
    not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"
)
pytestmark = pytest.mark.slow  # most tests train the tiny model for a few steps


def tiny_config(steps: int = 4):
    """runlocal on 500 pairs: a log record every step, eval and checkpoint every 2, no BLEU
    and no closing test report (`tests.tiny_run`)."""
    return tiny_run.tiny_config(steps)


class Killed(Exception):
    """Stands for a kill: the run stops between two steps without logging or saving."""


def train(workdir: Path, steps: int = 4, kill_at: int | None = None, **kwargs):
    """`train_and_evaluate`; with `kill_at`, the run dies (an exception) after that step,
    before it logs or saves it."""
    from transformer_jax.training import train_and_evaluate

    config = kwargs.pop("config", None) or tiny_config(steps)

    def after_step(end):
        if end.step == kill_at:
            raise Killed(f"killed at step {kill_at}")
        return False

    return train_and_evaluate(config, workdir, after_step=after_step, **kwargs)


def records(workdir: Path, split: str) -> list[int]:
    return [r["step"] for r in history.read_metrics(workdir) if r["split"] == split]


def data_files(workdir: Path, step: int) -> list[Path]:
    state = workdir / "checkpoints" / str(step) / "state"
    return sorted(p for p in state.rglob("d/*") if p.is_file())


@pytest.fixture(scope="module")
def trained(tiny_workdir) -> Path:
    """A finished 4-step run: checkpoints 2 and 4, train records 1-4, eval records 2 and 4
    (`tiny_config(4)`, trained once for the session by tests/conftest.py; tests that change
    it work on a copy)."""
    return tiny_workdir


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    workdir = tmp_path / "run"
    shutil.copytree(trained, workdir)
    return workdir


# --- verified restore ---------------------------------------------------------------------


def test_restore_check_rejects_nan_and_changed_bytes_in_the_optimizer_state(trained):
    bundle_state, abstract = _restore(trained, 4)
    meta = {"step": 4, "leaf_digests": leaf_digests(bundle_state)}
    check_restored(bundle_state, abstract, meta, step=4)  # the saved state passes
    import jax

    leaf = next(  # an Adam first moment (mu) of a kernel
        x
        for path, x in jax.tree_util.tree_leaves_with_path(bundle_state.opt_state)
        if ".mu" in jax.tree_util.keystr(path) and x.ndim == 2
    )

    saved = leaf.flat[3]
    leaf.flat[3] = 1e30  # finite garbage: only the digest can tell
    with pytest.raises(CorruptCheckpointError, match=r"differ from what was saved.*opt_state"):
        check_restored(bundle_state, abstract, meta, step=4)
    leaf.flat[3] = np.nan
    with pytest.raises(CorruptCheckpointError, match=r"non-finite.*opt_state"):
        check_restored(bundle_state, abstract, {"step": 4}, step=4)  # an old, digestless one
    leaf.flat[3] = saved
    with pytest.raises(CorruptCheckpointError, match="inconsistent step"):
        check_restored(bundle_state, abstract, {"step": 4}, step=6)


def _restore(workdir: Path, step: int):
    from transformer_jax.data import load_tokenizers
    from transformer_jax.training.optimizer import make_optimizer
    from transformer_jax.training.state import abstract_train_state, model_config_from

    config = ckpt.load_config(workdir)
    src, tgt = load_tokenizers(workdir / "tokenizer")
    model_config = model_config_from(config, src.vocab_size, tgt.vocab_size)
    tx, _ = make_optimizer(config, model_config.model_dim, total_steps=1)
    abstract = abstract_train_state(model_config, tx)
    manager = ckpt.make_manager(workdir, keep=5, read_only=True)
    try:
        state, _, _ = ckpt._restore(manager, step, abstract)
    finally:
        manager.close()
    import jax

    return jax.tree.map(np.array, state), abstract  # writable host copies


@needs_corpus
def test_bytes_flipped_in_the_latest_checkpoint_are_caught_and_the_previous_used(run_copy, caplog):
    # 64 random bytes inside the largest ocdbt data file: it still decodes, to finite
    # garbage (before the digests, "Resumed from step 4" and a NaN loss at step 5).
    target = max(data_files(run_copy, 4), key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 4 : len(data) // 4 + 64] = np.random.default_rng(0).bytes(64)
    target.write_bytes(bytes(data))

    final = train(run_copy, steps=6)
    assert np.isfinite(final["nll"]) and np.isfinite(final["train_loss"])
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "checkpoints/4 is corrupt or unusable" in errors[0], errors
    assert [p.name.split("-")[0] for p in (run_copy / ckpt.CORRUPT_DIR).iterdir()] == ["4"]
    assert sorted(int(p.name) for p in (run_copy / "checkpoints").iterdir()) == [2, 4, 6]
    assert records(run_copy, "train") == [1, 2, 3, 4, 5, 6]  # steps 3, 4 once: retrained


@needs_corpus
def test_an_unreadable_checkpoint_is_one_line_without_orbax_noise(run_copy, capfd, caplog):
    for path in data_files(run_copy, 4):
        path.write_bytes(os.urandom(path.stat().st_size))
    translator = Translator.from_workdir(run_copy)  # read-only: reports, moves nothing
    assert translator.step == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "checkpoints/4" in errors[0] and "left in place" in errors[0]
    captured = capfd.readouterr()
    assert "Event loop is closed" not in captured.err + captured.out
    assert (run_copy / "checkpoints" / "4").is_dir()


# --- no silent restart --------------------------------------------------------------------


@needs_corpus
def test_all_checkpoints_corrupt_refuses_to_restart_unless_asked(run_copy):
    for step in (2, 4):
        for path in data_files(run_copy, step):
            path.write_bytes(os.urandom(path.stat().st_size))
    config_before = (run_copy / "config.json").read_bytes()
    with pytest.raises(history.NoUsableCheckpointError, match="--restart_from_scratch"):
        train(run_copy)
    assert (run_copy / "config.json").read_bytes() == config_before
    assert records(run_copy, "train") == [1, 2, 3, 4]  # the old history is still there
    with pytest.raises(history.NoUsableCheckpointError):  # and again on the next try
        train(run_copy)

    train(run_copy, restart_from_scratch=True)
    assert records(run_copy, "train") == [1, 2, 3, 4]  # one history: the new one
    (moved,) = (run_copy / history.PREVIOUS_DIR).iterdir()
    assert {p.name for p in moved.iterdir()} == {"metrics.jsonl", "tensorboard", ckpt.CORRUPT_DIR}
    assert len(history.read_metrics(moved)) == 6  # 4 train + 2 eval records of the old run


# --- guarded resume -----------------------------------------------------------------------


def test_a_changed_model_key_is_refused_before_anything_is_written(run_copy):
    before = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    config = tiny_config()
    config.model.ffn_dim = 64
    config.data.min_freq = 1
    with pytest.raises(ConfigMismatchError) as error:
        train(run_copy, config=config)
    message = str(error.value)
    assert "model.ffn_dim: 32 -> 64" in message and "data.min_freq: 2 -> 1" in message
    assert "new --workdir" in message and f"--init_from={run_copy}" in message
    after = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    assert after == before


def test_a_run_saved_before_a_key_existed_resumes_as_its_default(run_copy, caplog):
    """The training launcher passes the defaults: a key its config.json lacks is no change at
    the default, and a model key at another value is refused before anything is written."""
    path = run_copy / ckpt.CONFIG_FILE
    saved = json.loads(path.read_text(encoding="utf-8"))
    del saved["eval"]["loss_batch_size"], saved["model"]["norm_placement"]
    path.write_text(json.dumps(saved), encoding="utf-8")
    config = tiny_config(6)
    config.model.norm_placement = "pre"  # the saved run ran as the default, post-norm
    with pytest.raises(ConfigMismatchError, match=r"model.norm_placement: '<absent>' -> 'pre'"):
        train(run_copy, config=config)
    with caplog.at_level(logging.INFO):
        train(run_copy, steps=6)
    assert ckpt.load_config(run_copy).model.norm_placement == "post"  # recorded again
    resumed = [r.getMessage() for r in caplog.records if "Resuming" in r.getMessage()]
    assert len(resumed) == 1 and "with num_train_steps: 4 -> 6" in resumed[0], resumed


def test_config_changes_are_classified():
    base = tiny_config()
    base.schedule = "constant"
    old = base.to_dict()  # tuples, as config.to_dict() gives them; JSON would have lists
    new = tiny_config()
    new.schedule = "constant"
    new.num_train_steps = 8
    new.eval.beam_size = 4
    new.learning_rate = 0.5
    new.seed = 1
    kinds = {c.key: c.kind for c in config_changes(old, new)}
    assert kinds == {
        "num_train_steps": "accepted",
        "eval.beam_size": "accepted",
        "learning_rate": "optimisation",
        "seed": "refused",
    }
    old["schedule"] = new.schedule = "linear"  # now the run length moves the decay: warned
    kinds = {c.key: c.kind for c in config_changes(old, new)}
    assert kinds["num_train_steps"] == "optimisation"
    del old["data"]["batch_tokens"]  # a key added to the code after the run started
    kinds = {c.key: c.kind for c in config_changes(old, base)}
    assert kinds["data.batch_tokens"] == "new key"


def test_a_key_added_since_the_run_is_compared_at_its_default():
    """A saved config.json lacks the keys added to the code after its run: that run ran as
    their defaults, so at the default they are no change (a resumed run, a finished sweep
    point reused after an upgrade), and at another value they are that key's change."""
    old = tiny_config().to_dict()
    for section, key in (("data", "batch_tokens"), ("eval", "loss_batch_size")):
        assert old[section].pop(key) == run_defaults()[section][key]  # at their defaults
    assert config_changes(old, tiny_config(), run_defaults()) == []
    new = tiny_config()
    new.data.batch_tokens, new.eval.loss_batch_size = 144, 8
    changes = {c.key: (c.old, c.new, c.kind) for c in config_changes(old, new, run_defaults())}
    assert changes == {
        "data.batch_tokens": ("<absent>", 144, "refused"),  # another data stream
        "eval.loss_batch_size": ("<absent>", 8, "accepted"),
    }
    old["dropped_key"] = 1  # a key the code no longer has: accepted with a note
    kinds = {c.key: c.kind for c in config_changes(old, tiny_config(), run_defaults())}
    assert kinds == {"dropped_key": "new key"}


@needs_corpus
def test_a_changed_step_count_is_accepted_and_recorded(run_copy, caplog):
    train(run_copy, steps=6)
    assert ckpt.load_config(run_copy).num_train_steps == 6
    assert any("num_train_steps: 4 -> 6" in r.getMessage() for r in caplog.records)
    assert records(run_copy, "train") == [1, 2, 3, 4, 5, 6]


# --- one history ----------------------------------------------------------------------------


@needs_corpus
def test_metrics_and_tensorboard_hold_each_step_once_after_two_kills(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="absl")
    workdir = tmp_path / "killed"
    with pytest.raises(Killed):
        train(workdir, steps=8, kill_at=4)  # logged 1-3, saved 2
    assert records(workdir, "train") == [1, 2, 3]
    with pytest.raises(Killed):
        train(workdir, steps=8, kill_at=6)  # resumed at 2: logged 3-5, saved 4
    assert records(workdir, "train") == [1, 2, 3, 4, 5]
    final = train(workdir, steps=8)  # resumed at 4
    assert records(workdir, "train") == list(range(1, 9))
    assert records(workdir, "eval") == [2, 4, 6, 8]
    # Each resume dropped the record of the step logged after the checkpoint (3, then 5).
    assert caplog.text.count("dropped 1 metrics.jsonl records of later steps") == 2
    assert sorted(_purge_steps(workdir)) == [3, 5]  # TensorBoard hides the killed runs' steps

    # Nothing left to do: the final metrics again, without NaN, and nothing appended.
    metrics = (workdir / "metrics.jsonl").read_bytes()
    again = train(workdir, steps=8)
    assert (workdir / "metrics.jsonl").read_bytes() == metrics
    assert again["train_loss"] == pytest.approx(final["train_loss"])
    assert again["nll"] == pytest.approx(final["nll"])
    assert all(np.isfinite(v) for v in again.values())


def _purge_steps(workdir: Path) -> list[int]:
    """Steps of the SessionLog START events (tensorboardX's purge_step) in the event files."""
    from tensorboardX.proto import event_pb2

    steps = []
    for path in (workdir / "tensorboard").glob("events.out.tfevents.*"):
        data = path.read_bytes()
        offset = 0
        while offset + 12 <= len(data):  # TFRecord: length, crc, payload, crc
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 16 + length
            if event.HasField("session_log") and event.session_log.status == 1:
                steps.append(event.step)
    return steps


# --- fine-tune from another workdir -------------------------------------------------------


@needs_corpus
def test_init_from_starts_a_new_run_from_the_old_parameters(trained, tmp_path):
    import jax

    from transformer_jax.training.finetune import init_from_state
    from transformer_jax.training.optimizer import make_optimizer
    from transformer_jax.training.state import abstract_train_state

    source = Translator.from_workdir(trained)
    tx, _ = make_optimizer(source.config, source.model_config.model_dim, total_steps=2)
    state, step = init_from_state(trained, abstract_train_state(source.model_config, tx), tx, 0)
    assert step == 4 and int(state.step) == 0
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(source.params), strict=True):
        np.testing.assert_array_equal(a, b)
    moments = [
        x
        for path, x in jax.tree_util.tree_leaves_with_path(state.opt_state)
        if ".mu" in jax.tree_util.keystr(path) or ".nu" in jax.tree_util.keystr(path)
    ]
    assert moments and all(not np.any(x) for x in moments)  # a fresh Adam

    config = tiny_config(2)
    config.model.dropout_rate = 0.0  # refused on resume, fine in a fine-tune
    finetuned = tmp_path / "finetuned"
    train(finetuned, config=config, init_from=trained)
    meta = json.loads((finetuned / "checkpoints" / "2" / "meta" / "metadata").read_text())
    assert meta["init_from"] == str(trained.absolute()) and meta["init_from_step"] == 4
    assert ckpt.load_config(finetuned).model.dropout_rate == 0.0
    assert records(finetuned, "train") == [1, 2]

    shapes = tiny_config(2)
    shapes.model.ffn_dim = 64
    with pytest.raises(InitFromError, match="other shapes"):
        train(tmp_path / "wrong_shapes", config=shapes, init_from=trained)
    with pytest.raises(InitFromError, match="own workdir"):
        train(finetuned, config=config, init_from=finetuned)


# --- workdir errors -------------------------------------------------------------------------


def _unwritable_dir(tmp_path: Path) -> Path | None:
    """A directory this process cannot write: chmod for a user; /sys (read-only) for root."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        return locked
    sys_dir = Path("/sys")
    try:
        check_workdir(sys_dir)
    except WorkdirError:
        return sys_dir
    return None


def test_workdir_errors_name_the_problem(tmp_path):
    with pytest.raises(WorkdirError, match="--workdir is empty"):
        check_workdir("")
    with pytest.raises(WorkdirError, match="--workdir is empty"):
        check_workdir("  ")
    regular = tmp_path / "file"
    regular.write_text("x")
    with pytest.raises(WorkdirError, match="is a file, not a directory"):
        check_workdir(regular)
    with pytest.raises(WorkdirError, match="cannot be created: .* is a file"):
        check_workdir(regular / "run")
    assert check_workdir(tmp_path / "new" / "run") == tmp_path / "new" / "run"
    assert not (tmp_path / "new").exists()  # the check creates nothing
    locked = _unwritable_dir(tmp_path)
    if locked is None:
        pytest.skip("no unwritable directory for this user")
    with pytest.raises(WorkdirError, match="is not writable"):
        check_workdir(locked)
    with pytest.raises(WorkdirError, match="cannot be created in"):
        check_workdir(locked / "run")


@pytest.mark.parametrize("kind", ["empty", "file", "unwritable", "changed_model"])
def test_the_launcher_says_one_fatal_line(kind, tmp_path, run_copy):
    regular = tmp_path / "file"
    regular.write_text("x")
    extra = []
    if kind == "unwritable":
        locked = _unwritable_dir(tmp_path)
        if locked is None:
            pytest.skip("no unwritable directory for this user")
        workdir = str(locked / "run")
    else:
        workdir = {"empty": "", "file": str(regular), "changed_model": str(run_copy)}[kind]
    if kind == "changed_model":
        extra = [
            "--config.data.train_split=train[:500]",
            "--config.data.bucketing=False",
            "--config.data.num_eval_examples=16",
            "--config.data.batch_size=16",
            "--config.model.ffn_dim=64",
        ]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.train",
            "--config=configs/fra_eng.py:runlocal",
            f"--workdir={workdir}",
            *extra,
        ],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    fatal = [line for line in proc.stderr.splitlines() if line.startswith("FATAL:")]
    assert len(fatal) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "Data:" not in proc.stderr  # failed before the data was prepared
    if kind == "changed_model":
        assert "model.ffn_dim: 32 -> 64" in fatal[0] and "--init_from=" in fatal[0]
