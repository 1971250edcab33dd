"""One builder: a run config -> model configs, optimizer and schedule, the mapped steps, state.

Every trainer of the project builds through here (the train loop, the benchmarks, the
tests), so the recipe "config -> model config -> optimizer/schedule -> step bindings ->
mapped step -> replicated state" is written once:

    built = build(config, src_vocab_size=8000, tgt_vocab_size=8000, total_steps=3600)
    state = built.parallel.put_replicated(built.init_state())     # donated from here on
    state, metrics = built.train_step(state, built.parallel.put_batch(batch))  # (B_proc, ...)

Nothing is compiled or initialised here: the steps compile on their first call and
`init_state()` runs only when called (a restore needs `abstract_state()` alone).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import ml_collections
import optax

from transformer_jax.nn import ModelConfig, Transformer
from transformer_jax.training import step as step_lib
from transformer_jax.training.optimizer import make_optimizer
from transformer_jax.training.parallel import DataParallel
from transformer_jax.training.state import (
    TrainState,
    abstract_train_state,
    create_train_state,
    model_config_from,
)


@dataclasses.dataclass(frozen=True)
class Built:
    """What a run config builds. The mapped steps take device values (`parallel.put_*`):

    train_step(state, batch) -> (state, metrics): one optimizer step; the state is donated.
    train_steps(state, batches) -> (state, metrics): N steps in one call (`lax.scan`) over
      `parallel.put_batches` of N batches; metrics stacked, each (N,).
    eval_step(params, batch) -> global sums of nll, correct and weight (no dropout).
    """

    model_config: ModelConfig  # training mode: dropout on
    eval_model_config: ModelConfig  # the same model, deterministic
    tx: optax.GradientTransformation
    schedule: optax.Schedule
    parallel: DataParallel
    train_step: Callable
    train_steps: Callable
    eval_step: Callable
    seed: int

    def init_state(self) -> TrainState:
        """A fresh host (numpy) state: step 0, parameters and dropout key from `seed`."""
        return create_train_state(self.model_config, self.tx, self.seed)

    def abstract_state(self) -> TrainState:
        """Shapes and dtypes of `init_state()`, computing nothing (for restores)."""
        return abstract_train_state(self.model_config, self.tx)


def build(
    config: ml_collections.ConfigDict,
    *,
    src_vocab_size: int,
    tgt_vocab_size: int,
    total_steps: int | None = None,
    parallel: DataParallel | None = None,
) -> Built:
    """Builds everything a training run computes with from a (validated) run config.

    Vocabulary sizes come from the tokenizers (or a benchmark's synthetic V). `total_steps`
    is the run's length, which the `linear` / `cosine` schedules decay over (None:
    `config.num_train_steps`). `parallel` defaults to `config.parallelism` over all devices.
    """
    parallel = parallel or DataParallel.create(config.parallelism)
    model_config = model_config_from(config, src_vocab_size, tgt_vocab_size)
    eval_model_config = model_config.replace(deterministic=True)
    tx, schedule = make_optimizer(config, model_config.model_dim, total_steps)
    kwargs = step_lib.step_kwargs(config, model_config, tx, schedule)
    return Built(
        model_config=model_config,
        eval_model_config=eval_model_config,
        tx=tx,
        schedule=schedule,
        parallel=parallel,
        train_step=parallel.map_train_step(functools.partial(step_lib.train_step, **kwargs)),
        train_steps=parallel.map_train_steps(functools.partial(step_lib.train_steps, **kwargs)),
        eval_step=mapped_eval_step(eval_model_config, parallel),
        seed=config.seed,
    )


@functools.lru_cache(maxsize=8)
def mapped_eval_step(eval_model_config: ModelConfig, parallel: DataParallel) -> Callable:
    """The data-parallel eval step of a (deterministic) model: eval_step(params, batch) -> sums.

    One object per (model, mapping), so the train loop's validation loss and the closing
    report's teacher-forced loss (`evaluation.report`) run one compiled program: on an
    accelerator each program is tens of seconds of compiling.
    """
    return parallel.map_eval_step(
        functools.partial(step_lib.eval_step, model=Transformer(eval_model_config))
    )
