"""End to end on a slice of the real corpus: train, checkpoint, SIGKILL, resume, evaluate.

Everything runs through the launcher (`python -m experiments.train`, which calls
`training.train_and_evaluate`) in subprocesses that share a JAX compilation cache; see
`tests/helpers.py` for the environment and the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.helpers import EVERY, STEPS, finish, flat_params, launch
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.training.state import abstract_train_state
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir.state_checks import CorruptCheckpointError

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"),
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    log = finish(launch(workdir))
    assert "Final validation" in log and "BLEU" in log, log[-3000:]
    # The launch ends by saying where its files are and how to translate with the model.
    assert f"Model:       {workdir / 'checkpoints' / str(STEPS)}" in log, log[-3000:]
    assert f"Report:      {workdir / 'eval_report.md'}" in log
    assert f"Plots:       {workdir / 'training_curves.png'}" in log
    assert f"| python -m experiments.translate --workdir={workdir}" in log
    assert "host_memory='reuse': glibc keeps freed memory" in log  # the config's default
    return workdir


def test_run_writes_a_complete_workdir(uninterrupted):
    assert (uninterrupted / "config.json").is_file()
    config = ckpt.load_config(uninterrupted)
    assert config.num_train_steps == STEPS and config.data.max_src_len == 8
    saved = sorted(int(p.name) for p in (uninterrupted / "checkpoints").iterdir())
    assert saved == [STEPS - EVERY, STEPS]  # keep_checkpoints=2
    assert list((uninterrupted / "tensorboard").glob("events.out.tfevents.*"))
    records = [json.loads(line) for line in (uninterrupted / "metrics.jsonl").open()]
    train = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in train] == list(range(50, STEPS + 1, 50))
    assert train[-1]["loss"] < train[0]["loss"] - 0.3, "the loss did not go down"
    assert all(r["tokens_per_sec"] > 0 for r in train[1:])
    assert [r["step"] for r in evals] == [STEPS]
    assert {"nll", "accuracy", "perplexity", "bleu"} <= set(evals[0])
    assert np.isclose(evals[0]["perplexity"], np.exp(evals[0]["nll"]))


@pytest.mark.slow  # trains for real
def test_killed_run_resumes_to_the_same_parameters(uninterrupted, tmp_path):
    workdir = tmp_path / "killed"
    process = launch(workdir)
    first = workdir / "checkpoints" / str(EVERY)
    deadline = time.monotonic() + 300
    while not first.is_dir() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, f"finished before the kill:\n{output[-3000:]}"
    saved = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    assert saved and saved[-1] < STEPS, saved

    log = finish(launch(workdir))  # the same command again
    assert f"Resumed from step {saved[-1]}" in log, log[-3000:]
    np.testing.assert_array_equal(flat_params(workdir), flat_params(uninterrupted))


def test_translator_restores_the_params_alone_and_translates(uninterrupted, monkeypatch):
    from transformer_jax.inference import Translator
    from transformer_jax.training import optimizer

    def no_optimizer(*args, **kwargs):
        raise AssertionError("inference must not build an optimizer")

    monkeypatch.setattr(optimizer, "make_optimizer", no_optimizer)
    translator = Translator.from_workdir(uninterrupted)
    assert translator.step == STEPS and translator.model_config.deterministic
    assert translator.averaged_steps == ()
    # The params subtree equals the one a full restore (as a resume does) reads.
    config = ckpt.load_config(uninterrupted)
    monkeypatch.undo()
    tx, _ = optimizer.make_optimizer(config, translator.model_config.model_dim)
    manager = ckpt.make_manager(uninterrupted, keep=2, read_only=True)
    state, _, _ = ckpt.restore_latest(
        manager, abstract_train_state(translator.model_config, tx), quarantine=False
    )
    manager.close()
    leaves = zip(jax.tree.leaves(translator.params), jax.tree.leaves(state.params), strict=True)
    for got, want in leaves:
        np.testing.assert_array_equal(got, want)
    out = translator.translate(["i am cold .", "go !"], max_decode_len=8)
    assert len(out) == 2 and all(isinstance(s, str) for s in out)


def test_params_whose_bytes_changed_are_refused(uninterrupted, tmp_path, caplog):
    """Finite but altered params (here: the saved digest of one leaf no longer matches)
    are not used: the previous checkpoint is, and the log names the leaf."""
    from transformer_jax.inference import Translator

    workdir = tmp_path / "altered"
    shutil.copytree(uninterrupted, workdir)
    meta_file = next((workdir / "checkpoints" / str(STEPS) / "meta").glob("*metadata*"))
    meta = json.loads(meta_file.read_text())
    key = next(k for k in meta["leaf_digests"] if k.startswith(".params"))
    meta["leaf_digests"][key] = "0" * 32
    meta_file.write_text(json.dumps(meta))
    assert Translator.from_workdir(workdir).step == STEPS - EVERY
    assert "differ from what was saved" in caplog.text and key in caplog.text
    with pytest.raises(CorruptCheckpointError, match="differ from what was saved"):
        Translator.from_workdir(workdir, step=STEPS)  # asked for by name: an error


def test_corrupt_latest_checkpoint_falls_back_to_the_previous(uninterrupted, tmp_path, caplog):
    from transformer_jax.inference import Translator

    workdir = tmp_path / "corrupt"
    shutil.copytree(uninterrupted, workdir)
    for path in (workdir / "checkpoints" / str(STEPS) / "state").rglob("*"):
        if path.is_file():
            path.write_bytes(b"garbage")
    translator = Translator.from_workdir(workdir)  # read-only: reports, moves nothing
    assert translator.step == STEPS - EVERY
    assert "corrupt" in caplog.text and str(STEPS) in caplog.text

    # Training's restore moves the bad step aside, so the resumed run can save it again.
    config = ckpt.load_config(workdir)
    manager = ckpt.make_manager(workdir, keep=2)
    from transformer_jax.training.optimizer import make_optimizer

    tx, _ = make_optimizer(config, translator.model_config.model_dim)
    state, data_state, meta = ckpt.restore_latest(
        manager, abstract_train_state(translator.model_config, tx)
    )
    manager.close()
    assert int(state.step) == STEPS - EVERY and data_state["position"] >= 0
    assert meta["src_vocab_size"] == translator.src_tokenizer.vocab_size
    assert not (workdir / "checkpoints" / str(STEPS)).exists()
    assert list((workdir / ckpt.CORRUPT_DIR).iterdir())


def test_nan_loss_stops_the_run_and_is_never_saved(tmp_path):
    # lr 1e30: the first Adam update sends weights to ~1e30 (finite, saved), the next forward
    # pass overflows: the loss of step 2 is NaN.
    process = launch(
        tmp_path / "nan",
        "--config.schedule=constant",
        "--config.learning_rate=1e30",
        "--config.num_train_steps=5",
        "--config.checkpoint_every_steps=1",
        "--config.log_every_steps=1",
        "--config.eval.num_bleu_examples=0",
    )
    output, _ = process.communicate(timeout=300)
    assert process.returncode != 0
    # One FATAL line (issue 39), no traceback.
    assert "FATAL: loss is nan at step 2: the run is stopped" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    saved = sorted(p.name for p in (tmp_path / "nan" / "checkpoints").iterdir())
    assert saved == ["1"], saved  # complete; no temporary or NaN step 2 directory


def test_no_checkpoint_error_names_directory_and_command(tmp_path):
    from configs import fra_eng

    ckpt.save_config(fra_eng.get_config("runlocal"), tmp_path)  # a run that never saved
    from transformer_jax.inference import Translator

    # Sent to the command that made the run (its config.json), not to a shipped config's.
    with pytest.raises(ckpt.NoCheckpointError, match="re-running the command") as error:
        Translator.from_workdir(tmp_path)
    assert str(tmp_path / "checkpoints") in str(error.value)
    assert str(tmp_path / "config.json") in str(error.value)
    with pytest.raises(ckpt.NoCheckpointError, match="not a training workdir"):
        Translator.from_workdir(tmp_path / "missing")


def test_process_environment_is_unchanged():
    # These tests must not leak fake devices into the session (other tests assume 1 device).
    assert "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", "")
