"""benchmarks/time_to_bleu.py without training: overrides, the paused clock, the checkpoint hook.

The end-to-end run is the benchmark's smoke command (its docstring); here the hook is fed
`StepEnd`s by hand, with a fake clock and scorer, so the test takes a second.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np
import pytest

from benchmarks import time_to_bleu
from transformer_jax.training.train import StepEnd


def test_overrides_take_the_type_of_the_config_value():
    config = time_to_bleu.load_config(
        "configs/fra_eng.py:runlocal",
        [
            "--config.model.dtype=bfloat16",
            "--config.num_train_steps=7",
            "--config.learning_rate=2",
            "--config.data.bucketing=false",
            "--config.data.bucket_boundaries=(4, 8)",
        ],
    )
    assert config.model.dtype == "bfloat16"
    assert config.num_train_steps == 7
    assert config.learning_rate == 2.0 and isinstance(config.learning_rate, float)
    assert config.data.bucketing is False
    assert config.data.bucket_boundaries == (4, 8)


def test_the_deprecated_set_is_the_same_override():
    parser = argparse.ArgumentParser()
    time_to_bleu.add_config_args(parser)
    argv = ["--set", "model.dtype=bfloat16", "--config.seed=3", "--set", "data.bucketing=false"]
    args, overrides = time_to_bleu.parse_args(parser, argv)
    assert args.config == time_to_bleu.DEFAULT_CONFIG
    assert overrides == [
        "--config.model.dtype=bfloat16",
        "--config.data.bucketing=false",
        "--config.seed=3",
    ]
    with pytest.raises(SystemExit):  # argparse's one-line error
        time_to_bleu.parse_args(parser, ["--sett", "seed=3"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("--config.model.nope=1", "model has no key 'nope'"),
        ("--config.x.y=1", "the top level has no key 'x'"),
        ("--config.num_train_steps=many", "num_train_steps takes an integer"),
    ],
)
def test_bad_overrides_name_the_problem(override, message):
    with pytest.raises(ValueError, match=message):
        time_to_bleu.load_config("configs/fra_eng.py:runlocal", [override])
    with pytest.raises(ValueError, match="key=value"):
        time_to_bleu.set_override("num_train_steps")


def test_clock_leaves_out_paused_time(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time_to_bleu.time, "perf_counter", lambda: now[0])
    clock = time_to_bleu.Clock()
    now[0] += 5
    with clock.paused():
        now[0] += 60
    now[0] += 2
    assert clock.seconds() == 7


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def seconds(self) -> float:
        return self.now

    @contextlib.contextmanager
    def paused(self):
        yield


class FakeScorer:
    beams = [1]

    def __init__(self, *args):
        pass

    def __call__(self, params):
        return {"bleu_beam1": float(params), "chrf_beam1": 2.0 * params}


def batch(tokens: int) -> dict[str, np.ndarray]:
    """A (D=1, B=1) batch with `tokens` source and `tokens` target tokens."""
    return {"src_len": np.array([[tokens]]), "tgt_weight": np.ones((1, 1, tokens))}


def test_hook_scores_due_checkpoints_and_stops_after_the_last(monkeypatch):
    monkeypatch.setattr(time_to_bleu, "TestScorer", FakeScorer)
    clock = FakeClock()
    args = argparse.Namespace(checkpoints_min="1,2,3")
    hook = time_to_bleu.CheckpointHook(None, None, args, clock)
    fetched = []

    def end(step: int, seconds: float, total: int = 100) -> StepEnd:
        clock.now = seconds
        return StepEnd(step, total, [batch(5)], lambda: fetched.append(step) or step)

    assert hook(end(1, 30)) is False  # nothing due: parameters are not even fetched
    assert hook(end(2, 61)) is False  # 1 min
    assert hook(end(3, 200)) is True  # 2 and 3 min passed together: one row, then stop
    assert fetched == [2, 3]
    assert [(r["checkpoint_min"], r["steps"], r["train_tokens"]) for r in hook.rows] == [
        (1.0, 2, 20),
        (3.0, 3, 30),
    ]
    assert hook.rows[1]["bleu_beam1"] == 3.0 and hook.rows[1]["note"] == ""


def test_hook_scores_the_last_step_when_the_run_ends_first(monkeypatch):
    monkeypatch.setattr(time_to_bleu, "TestScorer", FakeScorer)
    clock = FakeClock()
    hook = time_to_bleu.CheckpointHook(None, None, argparse.Namespace(checkpoints_min="5"), clock)
    clock.now = 10
    assert hook(StepEnd(4, 4, [batch(1)], lambda: 4)) is False
    (row,) = hook.rows
    assert row["checkpoint_min"] is None and row["steps"] == 4
    assert "num_train_steps=4" in row["note"] and hook.due == [5.0]
