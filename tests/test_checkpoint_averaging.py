"""Checkpoint averaging (workdir/averaging.py): the float64 mean of parameter trees, and the
average of a tiny real run's checkpoints through the library, Translator.from_workdir and the
`experiments.average_checkpoints` command."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.inference import Translator
from transformer_jax.training.state import abstract_run_state
from transformer_jax.workdir.averaging import (
    TooFewCheckpointsError,
    average_trees,
    write_averaged_checkpoint,
)
from transformer_jax.workdir.params import average_checkpoints


def random_tree(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "encoder": {
            "kernel": rng.normal(size=(4, 8)).astype(np.float32),
            "bias": rng.normal(size=(8,)).astype(np.float32),
        },
        "embed": rng.normal(size=(5, 3)).astype(ml_dtypes.bfloat16),
        "scale": np.float32(rng.normal()),
    }


def float64_mean(trees: list) -> dict:
    """Independent reference: numpy's mean over a stacked float64 axis, cast back."""
    return jax.tree.map(
        lambda *xs: np.mean(np.stack([np.asarray(x, np.float64) for x in xs]), axis=0).astype(
            np.asarray(xs[0]).dtype
        ),
        *trees,
    )


def assert_trees_equal(got, want) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for (path, g), w in zip(
        jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True
    ):
        assert np.asarray(g).dtype == np.asarray(w).dtype, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w), jax.tree_util.keystr(path))


# --- average_trees ------------------------------------------------------------------------


def test_average_of_identical_trees_is_bit_identical():
    tree = random_tree(0)
    tree["encoder"]["bias"][0] = -0.0  # the sign of zero survives too
    averaged = average_trees([tree] * 3)
    for a, b in zip(jax.tree.leaves(averaged), jax.tree.leaves(tree), strict=True):
        assert a.dtype == b.dtype
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_average_is_the_float64_elementwise_mean():
    trees = [random_tree(seed) for seed in range(3)]
    averaged = average_trees(trees)
    assert_trees_equal(averaged, float64_mean(trees))
    assert averaged["embed"].dtype == ml_dtypes.bfloat16
    # Not one tree's value: the mean really mixes them.
    assert not np.array_equal(averaged["encoder"]["kernel"], trees[0]["encoder"]["kernel"])


def test_mismatched_shape_names_the_path_and_both_shapes():
    other = random_tree(1)
    other["encoder"]["kernel"] = np.zeros((4, 16), np.float32)
    with pytest.raises(ValueError, match="different model configs") as error:
        average_trees([random_tree(0), other])
    message = str(error.value)
    assert "['encoder']['kernel']" in message
    assert "float32[4, 8]" in message and "float32[4, 16]" in message


def test_mismatched_dtype_names_the_path():
    other = random_tree(1)
    other["embed"] = other["embed"].astype(np.float32)
    with pytest.raises(ValueError, match=r"\['embed'\] is bfloat16\[5, 3\] in tree 0 but float32"):
        average_trees([random_tree(0), other])


def test_missing_key_names_the_path():
    other = random_tree(1)
    del other["encoder"]["bias"]
    with pytest.raises(ValueError, match=r"\['encoder'\]\['bias'\].*different model configs"):
        average_trees([random_tree(0), other])
    last = random_tree(1)
    del last["scale"]  # the last leaf in order: only the leaf counts differ
    with pytest.raises(ValueError, match=r"only tree 0 has the parameter \['scale'\]"):
        average_trees([random_tree(0), last])


def test_empty_input_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one tree"):
        average_trees([])


# --- a real run ---------------------------------------------------------------------------

STEPS = 3  # one checkpoint per step: 1, 2, 3


def _tiny_zip(path: Path) -> Path:
    """A d2l-shaped zip of 120 short synthetic pairs (no real corpus needed)."""
    words = ["go", "run", "stop", "wait", "help", "eat", "sing", "read"]
    lines = [
        f"{' '.join(words[(i + k) % 8] for k in range(1 + i % 4))}.\tmot{i % 7} fr{i % 5} !"
        for i in range(120)
    ]
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("fra-eng/fra.txt", "\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The runlocal tiny model trained 3 steps on a generated zip, a checkpoint every step."""
    from configs import fra_eng
    from transformer_jax.training import train_and_evaluate

    root = tmp_path_factory.mktemp("averaging")
    c = fra_eng.get_config("runlocal")
    c.data.zip_path = str(_tiny_zip(root / "fra-eng.zip"))
    c.data.url = ""
    c.data.data_dir = str(root / "tfds")
    c.data.train_split = "train"
    c.data.validation_fraction = c.data.test_fraction = 0.2
    c.data.min_freq = 1
    c.data.bucketing = False
    c.data.max_src_len = c.data.max_tgt_len = 8
    c.data.batch_size = 8
    c.data.num_eval_examples = 8
    c.num_train_steps = STEPS
    c.log_every_steps = c.checkpoint_every_steps = 1
    c.eval_every_steps = STEPS
    c.keep_checkpoints = STEPS
    c.eval.num_bleu_examples = 0
    train_and_evaluate(c, root / "run")
    return root / "run"


def test_average_checkpoints_is_the_mean_of_the_restored_params(workdir):
    last_two = [Translator.from_workdir(workdir, step).params for step in (2, 3)]
    params, steps = average_checkpoints(workdir, 2)
    assert steps == (2, 3)
    want = float64_mean(last_two)
    assert_trees_equal(params, want)
    assert not np.array_equal(  # the two steps differ, so the mean is neither of them
        jax.tree.leaves(params)[0], jax.tree.leaves(last_two[1])[0]
    )

    translator = Translator.from_workdir(workdir, average_last=2)
    assert translator.step == 3 and translator.averaged_steps == (2, 3)
    assert_trees_equal(translator.params, want)
    # Ending at an earlier step: the 2 checkpoints up to step 2.
    earlier = Translator.from_workdir(workdir, step=2, average_last=2)
    assert earlier.step == 2 and earlier.averaged_steps == (1, 2)
    plain = Translator.from_workdir(workdir)
    assert plain.averaged_steps == ()


def test_more_checkpoints_than_kept_is_a_clear_error(workdir):
    with pytest.raises(TooFewCheckpointsError) as error:
        average_checkpoints(workdir, 5)
    message = str(error.value)
    assert "has only 3 readable" in message and "steps [1, 2, 3]" in message
    assert "--config.keep_checkpoints=5" in message
    with pytest.raises(TooFewCheckpointsError, match="has only 2 readable up to step 2"):
        Translator.from_workdir(workdir, step=2, average_last=3)
    with pytest.raises(ValueError, match="use 1 \\(no averaging\\) or more"):
        average_checkpoints(workdir, 0)


def test_command_writes_a_workdir_evaluate_can_read(workdir, tmp_path):
    output = tmp_path / "avg"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.average_checkpoints",
            f"--workdir={workdir}",
            "--last=3",
            f"--output_workdir={output}",
        ],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"python -m experiments.evaluate --workdir={output}" in result.stdout
    assert "steps [1, 2, 3]" in result.stdout

    translator = Translator.from_workdir(output)
    assert translator.step == STEPS and translator.averaged_steps == (1, 2, 3)
    want = float64_mean([Translator.from_workdir(workdir, s).params for s in (1, 2, 3)])
    assert_trees_equal(translator.params, want)
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == [str(STEPS)]

    # Writing again into the same place, or into the run itself, is refused.
    abstract_state = abstract_run_state(workdir)
    with pytest.raises(ValueError, match="already has checkpoints"):
        write_averaged_checkpoint(workdir, 2, output, abstract_state=abstract_state)
    with pytest.raises(ValueError, match="is the input workdir"):
        write_averaged_checkpoint(workdir, 2, workdir, abstract_state=abstract_state)


def test_a_write_stopped_midway_leaves_no_output_and_the_next_try_succeeds(
    workdir, tmp_path, monkeypatch
):
    """The average is written aside and moved into place: a save that dies (as a killed
    process would) leaves no half-written output workdir to refuse on the next try."""
    from transformer_jax.workdir import averaging

    abstract_state = abstract_run_state(workdir)
    output = tmp_path / "avg"

    def dies(*args, **kwargs):
        raise KeyboardInterrupt  # stands in for a kill in the middle of the save

    with monkeypatch.context() as patch:
        patch.setattr(averaging.ckpt, "save_checkpoint", dies)
        with pytest.raises(KeyboardInterrupt):
            write_averaged_checkpoint(workdir, 2, output, abstract_state=abstract_state)
    assert list(tmp_path.iterdir()) == []  # no output, no staging folder
    (tmp_path / ".avg.partial").mkdir()  # as a killed try (no cleanup) leaves it
    write_averaged_checkpoint(workdir, 2, output, abstract_state=abstract_state)
    assert Translator.from_workdir(output).averaged_steps == (2, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg"]  # the partial one is gone
    # An existing folder with files in it (made by hand, or an export) is refused, untouched.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="already exists and is not empty"):
        write_averaged_checkpoint(workdir, 2, other, abstract_state=abstract_state)
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_command_reports_bad_input_as_fatal(workdir, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.average_checkpoints",
            f"--workdir={workdir}",
            "--last=4",
            f"--output_workdir={tmp_path / 'avg'}",
        ],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "FATAL: cannot average the last 4 checkpoints" in result.stderr
    assert "keep_checkpoints" in result.stderr
    assert not (tmp_path / "avg").exists()  # nothing written on failure
