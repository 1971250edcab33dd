"""The training loop compiles its step once per batch shape, and nothing after warm-up.

Runs the real `train_and_evaluate` (the runlocal config on the corpus, with two length
buckets, and logs, a checkpoint and an evaluation mid-run) and counts compilations with a
`jax.monitoring` listener on the backend-compile event: JAX records it for every executable it
builds, also when the persistent compilation cache (tests/conftest.py) supplies the binary, so
the count does not depend on what earlier runs cached. The loop's `after_step` hook marks which
step each compilation came before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from jax import monitoring

from configs import fra_eng
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.training.train import StepEnd, train_and_evaluate

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"),
]

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # jax._src.dispatch
STEPS, LOG_EVERY, EVAL_EVERY = 16, 4, 8
BUCKET_WIDTHS = {4, 24}  # boundary 4 and runlocal's max length 24; both occur in steps 1-2


@contextlib.contextmanager
def compilations() -> Iterator[list[str]]:
    """Names of the functions XLA compiles inside the block, in order."""
    names: list[str] = []

    def listener(event: str, duration: float, **kwargs) -> None:
        if event == BACKEND_COMPILE:
            names.append(str(kwargs.get("fun_name", "?")))

    monitoring.register_event_duration_secs_listener(listener)
    try:
        yield names
    finally:
        monitoring.unregister_event_duration_listener(listener)


def test_steps_after_warm_up_compile_nothing(tmp_path):
    config = fra_eng.get_config("runlocal")
    config.data.packing, config.data.bucketing = False, True  # two shapes (packed: one)
    config.data.bucket_boundaries = (4,)
    config.num_train_steps = STEPS
    config.log_every_steps = LOG_EVERY
    config.eval_every_steps = config.checkpoint_every_steps = EVAL_EVERY
    config.eval.num_bleu_examples = 0  # decoding compiles its own programs; the step is tested

    seen: list[tuple[int, tuple[int, ...], int]] = []  # (step, src/tgt widths, compiles so far)
    with compilations() as names:

        def after_step(end: StepEnd) -> bool:
            (batch,) = end.batches  # steps_per_call = 1
            widths = (batch["src"].shape[-1], batch["tgt_in"].shape[-1])
            seen.append((end.step, widths, len(names)))
            return False

        train_and_evaluate(config, tmp_path, after_step=after_step)
    total = len(names)

    assert [step for step, _, _ in seen] == list(range(1, STEPS + 1))
    widths = [w for _, w, _ in seen]
    assert {x for w in widths for x in w} <= BUCKET_WIDTHS, f"shapes outside the buckets: {widths}"
    assert len(set(widths)) == 2 and set(widths[:EVAL_EVERY]) == set(widths[EVAL_EVERY:]), widths

    # Between two steps with no log/eval/checkpoint in between, only the train step runs: it
    # compiles exactly when its batch shape is new.
    before = {step: count for step, _, count in seen}
    for i, (step, shape, count) in enumerate(seen[1:], start=1):
        if (step - 1) % LOG_EVERY:
            new = shape not in widths[:i]
            assert count - before[step - 1] == int(new), (
                f"step {step} (batch {shape}, {'new' if new else 'seen before'}) compiled "
                f"{names[before[step - 1] : count]}; all steps: {seen}"
            )

    # Warm-up = every shape seen, one log, checkpoint and evaluation done (they compile their
    # own small programs once). From there to the end of the run, the loop — more steps of
    # every shape, logs, another checkpoint and the final evaluation — compiles nothing.
    warm = before[EVAL_EVERY + 1]
    assert total == warm, f"compiled after warm-up: {names[warm:]}; steps: {seen}"
