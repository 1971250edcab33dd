"""The Flax `examples/wmt` Transformer beside ours: its `models.py` read from a given copy.

    models = flax_wmt.load_models(".flax_wmt")          # a copy of google/flax examples/wmt
    cfg = flax_wmt.transformer_config(models, built.model_config, vocab=V)
    wmt = flax_wmt.TrainStep(models, cfg)
    state = wmt.init(seed=0, batch=flax_wmt.wmt_batch(batch))   # jax.jit(model.init) as theirs
    state, loss = wmt.step(state, flax_wmt.wmt_batch(batch))    # jitted, the state donated

The example is never vendored: `--flax_wmt_dir` names a directory holding its `models.py`
(a git-ignored copy of the public repository, `.flax_wmt/` in `benchmarks/gpu_check.sh`),
imported from that file path. Only the model is theirs. Their train step is pmapped over a
Flax `TrainState` with a learning-rate schedule; the one here is what ours does per step:
cross-entropy over the non-pad targets divided by their count, gradients, Adam, in one jit
with the state donated, dropout keys folded from the step.

Sizes map one to one: their `num_layers` is both stacks (ours must have as many encoder as
decoder layers), `qkv_dim` = D, `mlp_dim` = F, `share_embeddings` / `logits_via_embedding`
= ours `share_embeddings` / `tie_output`, `dtype` = our resolved compute dtype (their
parameters stay float32 too). Their layers are norm-first (ours: `model.norm_placement`);
the matmul FLOPs are the same.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from transformer_jax.nn import ModelConfig

MODULE_NAME = "flax_wmt_models"  # their models.py, as imported here


def missing(directory: str | None) -> str | None:
    """Why the example cannot be loaded from `directory` ("not measured: ..."), or None."""
    if not directory:
        return "not measured: --flax_wmt_dir not given"
    if not (Path(directory) / "models.py").is_file():
        return f"not measured: no models.py in --flax_wmt_dir={directory}"
    return None


def load_models(directory: str | Path) -> ModuleType:
    """Their `models.py`, imported from `directory` (it needs only flax, jax and numpy)."""
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, Path(directory) / "models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


def transformer_config(models: ModuleType, model: ModelConfig, vocab: int) -> Any:
    """Our model config's sizes as their `TransformerConfig` (training mode: dropout on)."""
    if model.num_encoder_layers != model.num_decoder_layers:
        raise ValueError(
            f"Flax WMT has one num_layers for both stacks; ours has {model.num_encoder_layers}"
            f"+{model.num_decoder_layers}."
        )
    return models.TransformerConfig(
        vocab_size=vocab,
        output_vocab_size=vocab,
        share_embeddings=model.share_embeddings,
        logits_via_embedding=model.tie_output,
        dtype=model.compute_dtype,
        emb_dim=model.model_dim,
        num_heads=model.num_heads,
        num_layers=model.num_encoder_layers,
        qkv_dim=model.model_dim,
        mlp_dim=model.ffn_dim,
        dropout_rate=model.dropout_rate,
        attention_dropout_rate=model.attention_dropout_rate,
        deterministic=False,
        decode=False,
    )


def wmt_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our batch keys as theirs: inputs = src (B, S), targets = tgt_out (B, T) (their decoder
    shifts the targets right itself); packed rows bring positions and segment ids along."""
    out = {"inputs": batch["src"], "targets": batch["tgt_out"]}
    if "src_segment" in batch:
        out["inputs_positions"] = batch["src_position"]
        out["targets_positions"] = batch["tgt_position"]
        out["inputs_segmentation"] = batch["src_segment"]
        out["targets_segmentation"] = batch["tgt_segment"]
    return out


class TrainStep:
    """Init and one Adam step of their model, on our batches (`wmt_batch`)."""

    def __init__(self, models: ModuleType, cfg: Any, learning_rate: float = 1e-4):
        self.models, self.cfg = models, cfg
        self.tx = optax.adam(learning_rate)
        self.step = jax.jit(self._step, donate_argnums=0)

    def init(self, seed: int, batch: dict[str, np.ndarray]) -> tuple:
        """(params, opt_state, step, rng): `jax.jit(model.init)` on ones, as their train.py."""
        init_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(seed))
        model = self.models.Transformer(self.cfg.replace(deterministic=True))
        shape_s, shape_t = batch["inputs"].shape, batch["targets"].shape
        variables = jax.jit(model.init)(
            init_rng, jnp.ones(shape_s, jnp.float32), jnp.ones(shape_t, jnp.float32)
        )
        params = variables["params"]
        return params, jax.jit(self.tx.init)(params), jnp.zeros((), jnp.int32), dropout_rng

    def _step(self, state: tuple, batch: dict[str, jax.Array]) -> tuple[tuple, jax.Array]:
        params, opt_state, step, rng = state
        targets = batch["targets"]
        weights = (targets > 0).astype(jnp.float32)  # (B, T)
        model = self.models.Transformer(self.cfg)
        extra = {k: v for k, v in batch.items() if k not in ("inputs", "targets")}

        def loss_fn(p):
            logits = model.apply(
                {"params": p},
                batch["inputs"],
                targets,
                rngs={"dropout": jax.random.fold_in(rng, step)},
                **extra,
            )  # (B, T, V)
            nll = optax.softmax_cross_entropy_with_integer_labels(
                logits.astype(jnp.float32), targets
            )  # (B, T)
            return jnp.sum(nll * weights) / jnp.maximum(jnp.sum(weights), 1.0)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state, step + 1, rng), loss
