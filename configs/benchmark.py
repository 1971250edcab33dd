r"""The speed benchmarks' sizes as run configs, read through `--config` like the launchers.

    python -m benchmarks.train_step --config=configs/benchmark.py:small
    python -m benchmarks.train_step --config=configs/benchmark.py:base \
        --config.model.dtype=bfloat16 --config.steps_per_call=4
    python -m benchmarks.profile_step --config=configs/benchmark.py:d2l

Variants: `d2l`, `small` and `base`, each the model of that name in `transformer_jax/nn/variants.py`
(dropout 0.1) with the synthetic batch the benchmarks feed it: source and target length
L = `data.max_src_len` = `data.max_tgt_len` (each sentence's lengths uniform in [L/2, L]),
B = `data.batch_size` rows per global batch, V = `data.vocab_size` per side
(`benchmarks/common.py`). Any key can be overridden on the command line, e.g.
`--config.model.dtype=bfloat16`, `--config.parallelism=shard_map`,
`--config.host_memory=system` or `--config.xla_flags=...`.
"""

from __future__ import annotations

import ml_collections

from transformer_jax.data.config import data_config
from transformer_jax.nn import variants as model_variants
from transformer_jax.training.config import training_defaults

# Sequence length L, global batch B and vocabulary V of each benchmark size.
SIZES = {
    "d2l": dict(length=10, batch=64, vocab=200),  # d2l §11.7.5: num_steps 10, batch 64
    "small": dict(length=32, batch=64, vocab=8000),
    "base": dict(length=32, batch=32, vocab=16000),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The run config of benchmark size `arg` (default "small")."""
    name = arg or "small"
    if name not in SIZES:
        raise ValueError(f"Unknown benchmark size {name!r}; choose one of {sorted(SIZES)}.")
    size = SIZES[name]
    c = training_defaults()
    c.model = model_variants.model_section(name)
    c.data = data_config()
    c.data.max_src_len = c.data.max_tgt_len = size["length"]
    c.data.batch_size = size["batch"]
    c.data.vocab_size = size["vocab"]
    c.data.bucketing = False  # one synthetic batch shape
    # Adam at a small constant rate on plain cross-entropy: the same update for every size
    # and run length (torch_reference.py's optimizer and loss).
    c.schedule, c.learning_rate = "constant", 1e-4
    c.label_smoothing = 0.0
    # Only so that the config is a valid run config; the benchmarks time their own --steps.
    c.num_train_steps = 100
    return c
