"""The one frozen model config that every module takes (Flax WMT `TransformerConfig` style).

Training, evaluation and decoding use the same definition; the modes are derived with
`config.replace(deterministic=True)` and `config.replace(deterministic=True, decode=True)`.
Every value is validated when the config is made, before anything is traced or compiled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from transformer_jax.nn import precision
from transformer_jax.ops.matmul import GRADIENTS

NORM_PLACEMENTS = ("post", "pre", "rezero")
NORM_KINDS = ("layer", "rms")
ATTENTION_KINDS = ("dot", "additive")
POSITIONAL_KINDS = ("sinusoidal", "learned")
ACTIVATION_KINDS = ("relu", "gelu")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# Fields the code sets, not a run config's `model` section: the vocabulary sizes come from the
# tokenizers, the modes from `replace`, the gradient rule from the run config's `gradients`.
NOT_IN_RUN_CONFIG = ("src_vocab_size", "tgt_vocab_size", "deterministic", "decode", "gradients")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters of an encoder–decoder Transformer (shape letters in brackets).

    Attributes:
      src_vocab_size: source vocabulary size (V_src).
      tgt_vocab_size: target vocabulary size (V).
      num_encoder_layers / num_decoder_layers: stack depths (0 encoder layers is allowed
        for a decoder-only model).
      model_dim: D, the residual stream width.
      num_heads: H; each head sees K = D / H features of the projections.
      ffn_dim: F, the hidden width of the position-wise FFN.
      dropout_rate: dropout on embeddings, sublayer outputs and inside the FFN.
      attention_dropout_rate: dropout on attention weights (d2l uses the same rate).
      activation: FFN activation, "relu" (the paper) or "gelu".
      norm_placement: "post" (the paper, d2l AddNorm), "pre" (norm-first, with a final
        norm on the encoder and decoder outputs) or "rezero" (x + α·f(x), α = 0 at init).
      norm_kind: "layer" or "rms".
      norm_eps: epsilon of the normalisation.
      attention_kind: "dot" (scaled dot-product) or "additive" (vᵀ tanh(W_q q + W_k k)).
      additive_dim: hidden width A of the additive scorer per head (0 means K).
      positional: "sinusoidal" (fixed table) or "learned".
      max_len: with learned positions, the rows of the position table: the longest source
        or target the model can encode. Sinusoidal positions are computed for any length,
        so there it is no limit (`position_limit` is None).
      share_embeddings: one embedding table for source and target (needs equal vocabs).
      tie_output: the output projection reuses the target embedding matrix.
      use_bias: biases on the Q, K, V, O projections.
      dtype: compute dtype, "float32", "bfloat16" or "auto" (parameters stay float32).
        bfloat16 matmuls accumulate in float32 (`ops.einsum`); they are faster on TPUs, GPUs
        and AMX CPUs, and slower than float32 on CPUs without AMX. "auto" picks the fast one
        for the machine it runs on (`nn.precision.fast_compute_dtype`).
      remat: recompute each block's activations in the backward pass instead of keeping
        them (`nn.remat`): activation memory of one block instead of all, for about one
        more forward pass of compute. Training only; parameters and results are unchanged.
      deterministic: no dropout (evaluation, decoding).
      decode: incremental decoding with the key/value cache.
      gradients: the derivative rule of every matmul (`ops.einsum`) and of the loss:
        "autodiff" (the default: JAX's own, so jvp, jacfwd, linearize, Hessians, vmap
        and remat all work) or "custom_vjp" (custom VJPs, reverse mode only, faster on
        XLA:CPU; the train step sets it from the run config's `gradients`).
      pad_id: the padding token id.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    model_dim: int = 32
    num_heads: int = 4
    ffn_dim: int = 64
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    activation: str = "relu"
    norm_placement: str = "post"
    norm_kind: str = "layer"
    norm_eps: float = 1e-5
    attention_kind: str = "dot"
    additive_dim: int = 0
    positional: str = "sinusoidal"
    max_len: int = 1024
    share_embeddings: bool = False
    tie_output: bool = False
    use_bias: bool = True
    dtype: str = "float32"
    remat: bool = False
    deterministic: bool = False
    decode: bool = False
    gradients: str = "autodiff"
    pad_id: int = 0

    def __post_init__(self) -> None:
        _check_choice("norm_placement", self.norm_placement, NORM_PLACEMENTS)
        _check_choice("norm_kind", self.norm_kind, NORM_KINDS)
        _check_choice("attention_kind", self.attention_kind, ATTENTION_KINDS)
        _check_choice("positional", self.positional, POSITIONAL_KINDS)
        _check_choice("activation", self.activation, ACTIVATION_KINDS)
        _check_choice("dtype", self.dtype, (*DTYPES, "auto"))
        _check_choice("gradients", self.gradients, GRADIENTS)
        for name in ("src_vocab_size", "tgt_vocab_size", "model_dim", "num_heads", "ffn_dim"):
            _check_positive_int(name, getattr(self, name))
        for name in ("num_encoder_layers", "num_decoder_layers", "additive_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"model.{name} must be an integer >= 0, got {value!r}.")
        _check_positive_int("max_len", self.max_len)
        if self.model_dim % self.num_heads:
            divisors = [h for h in range(1, self.model_dim + 1) if self.model_dim % h == 0]
            raise ValueError(
                f"model.model_dim={self.model_dim} is not divisible by model.num_heads="
                f"{self.num_heads}: each head takes D/H features of the projections. "
                f"Valid num_heads for this D: {divisors}."
            )
        for name in ("dropout_rate", "attention_dropout_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"model.{name}={rate!r} is outside [0, 1).")
        if self.norm_eps <= 0:
            raise ValueError(f"model.norm_eps must be > 0, got {self.norm_eps!r}.")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "model.share_embeddings=True needs one vocabulary, but src_vocab_size="
                f"{self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}. Use a "
                "shared tokenizer (data.shared_vocab=True) or set share_embeddings=False."
            )

    @property
    def head_dim(self) -> int:
        """K = D / H."""
        return self.model_dim // self.num_heads

    @property
    def position_limit(self) -> int | None:
        """Longest source or target (tokens, `<eos>` included) the model can encode: the
        learned table's `max_len`, or None for sinusoidal positions (computed for any length)."""
        return self.max_len if self.positional == "learned" else None

    @property
    def compute_dtype(self) -> Any:
        """The dtype of activations and matmuls; "auto" is resolved for this machine."""
        return DTYPES[precision.resolve_dtype(self.dtype)]

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with `changes` applied (and validated), e.g. `replace(decode=True)`."""
        _check_keys(changes)
        return dataclasses.replace(self, **changes)

    @classmethod
    def defaults_dict(cls) -> dict[str, Any]:
        """The default of every key of a run config's `model` section (the one place they live).

        `nn/variants.py` starts each variant from these and lists only what it changes.
        """
        return {
            f.name: f.default
            for f in dataclasses.fields(cls)
            if f.name not in NOT_IN_RUN_CONFIG and f.default is not dataclasses.MISSING
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], **extra: Any) -> ModelConfig:
        """Build from a mapping (e.g. an ml_collections `config.model`), rejecting unknown keys."""
        merged = {**dict(values), **extra}
        _check_keys(merged)
        return cls(**merged)


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(ModelConfig))


def _check_keys(values: Mapping[str, Any]) -> None:
    unknown = sorted(set(values) - set(field_names()))
    if unknown:
        raise ValueError(
            f"Unknown model config key(s) {unknown}. Valid keys: {', '.join(field_names())}."
        )


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"model.{name}={value!r} is not valid; choose one of {list(choices)}.")


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"model.{name} must be a positive integer, got {value!r}.")
