"""The fault tests' tiny run (issue 39): runlocal on 500 pairs, a record every step, as a
ConfigDict for `train_and_evaluate` and as the launcher command of the same run, so that a
test can train in-process and resume through `experiments.train` (or the other way).

Test modules import from here and from `tests.helpers`, never from each other.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Checkpoint and evaluate every 2 steps (no BLEU, no test report): a few seconds a run.
TINY = {
    "data.train_split": "train[:500]",
    "data.bucketing": False,
    "data.num_eval_examples": 16,
    "data.batch_size": 16,
    "log_every_steps": 1,
    "eval_every_steps": 2,
    "checkpoint_every_steps": 2,
    "keep_checkpoints": 5,
    "eval.num_bleu_examples": 0,
    "eval.num_test_examples": -1,
}


def tiny_config(steps: int, **overrides):
    """The tiny run's ConfigDict for `train_and_evaluate` (keys as in TINY, dots as __)."""
    from configs import fra_eng

    config = fra_eng.get_config("runlocal")
    values = {**TINY, "num_train_steps": steps}
    values.update({key.replace("__", "."): value for key, value in overrides.items()})
    for dotted, value in values.items():
        *sections, key = dotted.split(".")
        section = config
        for name in sections:
            section = section[name]
        section[key] = value
    return config


def tiny_command(workdir: Path, steps: int, *extra: str) -> list[str]:
    """The launcher command of the same run (`python -m experiments.train ...`)."""
    flags = [f"--config.{key}={value}" for key, value in {**TINY, "num_train_steps": steps}.items()]
    return [
        sys.executable,
        "-m",
        "experiments.train",
        "--config=configs/fra_eng.py:runlocal",
        f"--workdir={workdir}",
        *flags,
        *extra,
    ]
