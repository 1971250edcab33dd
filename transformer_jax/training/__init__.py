"""Training: losses, optimizer, the per-device steps and their mapping, metrics, and the
`train_and_evaluate` loop (checkpoints and the rest of a workdir: `transformer_jax.workdir`).

    from transformer_jax import training
    training.train_and_evaluate(config, workdir, evaluators=[...])  # training.evaluators
    built = training.build(config, src_vocab_size=V, tgt_vocab_size=V)  # model, optimizer,
    state = built.parallel.put_replicated(built.init_state())          # mapped steps, state
"""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.training.builder": ["Built", "build"],
        "transformer_jax.training.config": [
            "resolve_num_train_steps",
            "training_defaults",
            "validate_config",
        ],
        "transformer_jax.training.losses": ["smoothed_cross_entropy", "weighted_loss_sums"],
        "transformer_jax.training.optimizer": ["make_optimizer", "paper_schedule"],
        "transformer_jax.training.parallel": ["DataParallel"],
        "transformer_jax.training.state": ["TrainState", "create_train_state", "model_config_from"],
        "transformer_jax.training.step": ["eval_step", "train_step", "train_steps"],
        "transformer_jax.training.train": ["NonFiniteLossError", "train_and_evaluate"],
        "transformer_jax.workdir.checkpoints": ["NoCheckpointError"],
    },
)
