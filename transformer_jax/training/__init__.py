"""Training: losses, optimizer, the per-device steps and their mapping, metrics, and the
`train_and_evaluate` loop (checkpoints and the rest of a workdir: `transformer_jax.workdir`).

    from transformer_jax import training
    training.train_and_evaluate(config, workdir, evaluators=[...])  # training.evaluators
    built = training.build(config, src_vocab_size=V, tgt_vocab_size=V)  # model, optimizer,
    state = built.parallel.put_replicated(built.init_state())          # mapped steps, state
"""

from transformer_jax.training.builder import Built, build
from transformer_jax.training.config import (
    resolve_num_train_steps,
    training_defaults,
    validate_config,
)
from transformer_jax.training.losses import smoothed_cross_entropy, weighted_loss_sums
from transformer_jax.training.optimizer import make_optimizer, paper_schedule
from transformer_jax.training.parallel import DataParallel
from transformer_jax.training.state import TrainState, create_train_state, model_config_from
from transformer_jax.training.step import eval_step, train_step, train_steps
from transformer_jax.training.train import NonFiniteLossError, train_and_evaluate
from transformer_jax.workdir.checkpoints import NoCheckpointError

__all__ = [
    "Built",
    "DataParallel",
    "NoCheckpointError",
    "NonFiniteLossError",
    "TrainState",
    "build",
    "create_train_state",
    "eval_step",
    "make_optimizer",
    "model_config_from",
    "paper_schedule",
    "resolve_num_train_steps",
    "smoothed_cross_entropy",
    "train_and_evaluate",
    "train_step",
    "train_steps",
    "training_defaults",
    "validate_config",
    "weighted_loss_sums",
]
