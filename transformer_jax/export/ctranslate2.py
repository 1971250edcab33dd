"""Convert a trained encoder–decoder into a CTranslate2 model directory.

    export_ctranslate2(workdir, "model_ct2", quantization="int8")
    ctranslate2.Translator("model_ct2").translate_batch([["go", "."]], beam_size=4)

The model is described with `ctranslate2.specs.TransformerSpec` and filled with our
parameters (the same route as CTranslate2's own OpenNMT-py and fairseq converters):

- attention: our (D, H, K) head kernels are the (D, D) projections of d2l §11.5 split into
  heads, so each becomes a (D, D) `weight` (out × in) by a reshape and a transpose;
  CTranslate2 fuses Q/K/V (self-attention) and K/V (cross-attention) into one linear;
- norms: post-norm and pre-norm map onto `pre_norm`; `norm_eps` goes to the model config's
  `layer_norm_epsilon` (CTranslate2 would otherwise use 1e-5 or 1e-6);
- positions: CTranslate2's built-in sinusoidal table concatenates sin | cos with
  tensor2tensor's timescales and starts at position 1, ours interleaves sin, cos (d2l
  §11.6.3) from position 0, so the table is written out explicitly (`encodings`, the rows
  of `ops.sinusoidal_rows`, the function our model adds them with); a learned table is
  copied. Either way CTranslate2 then knows `max_positions` rows: longer inputs are an error;
- embeddings are scaled by √D in both (`scale_embeddings`); a tied output projection is
  the target embedding matrix without bias; shared embeddings are one array in both stacks;
- a model computed in bfloat16 (`model.dtype`) is exported with its float32 parameters and
  runs in CTranslate2's compute type, so it matches a float32 run of ours, not a bfloat16 one;
- vocabularies are the tokenizers' token strings (SentencePiece pieces or words). Our
  special tokens keep their names (`<pad>`, `<bos>`, `<eos>`, `<unk>` = ids 0..3): the
  model config tells CTranslate2 that `<bos>` starts decoding, `<eos>` ends it and is
  appended to every source (`add_source_eos`, as our `encode_sources`), `<unk>` is unknown.

The tokenizers are saved beside the model (`tokenizer/`, with a book-style run's truecaser
for natural text) with `export.json` (which holds the sha256 of every file, `manifest`), so
`ct2_translate.translate_lines` can serve the directory without this package's model code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from transformer_jax import ops
from transformer_jax.data.truecasing import TRUECASER_FILE
from transformer_jax.data.vocab import BOS, EOS, NUM_SPECIAL, SPECIAL_TOKENS, UNK
from transformer_jax.decoding.defaults import DEFAULTS
from transformer_jax.export.extras import MissingExtraError, import_extra
from transformer_jax.export.manifest import DIGESTS, MANIFEST, file_digests
from transformer_jax.export.staging import check_new, staged_dir
from transformer_jax.export.trained_model import load_trained
from transformer_jax.inference import Translator
from transformer_jax.nn import ModelConfig

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16")
# CTranslate2's converter casts to bfloat16 with torch (`specs.model_spec`), not numpy.
NEEDS_TORCH = ("bfloat16",)
TOKENIZER_DIR = "tokenizer"
SRC_TOKENIZER, TGT_TOKENIZER = "source", "target"
# Rows of the position table written for sinusoidal models: sources and outputs up to this
# many tokens (`<eos>` included). CTranslate2 itself starts with 500 and grows on demand.
DEFAULT_MAX_POSITIONS = 1024
NEEDED_BY = "export to CTranslate2 (--format=ctranslate2)"  # what a missing extra stops


class UnsupportedModelError(ValueError):
    """The model uses a choice that CTranslate2's Transformer cannot express."""


def unsupported_choices(config: ModelConfig) -> list[str]:
    """The model config's choices that CTranslate2's `TransformerSpec` cannot express."""
    problems = []
    if config.norm_placement == "rezero":
        problems.append(
            "model.norm_placement='rezero' (x + α·f(x) has no norm for CTranslate2 to run; "
            "use 'post' or 'pre')"
        )
    if config.attention_kind == "additive":
        problems.append(
            "model.attention_kind='additive' (CTranslate2 only has scaled dot-product "
            "attention; use 'dot')"
        )
    if config.num_encoder_layers == 0:
        # The converted model does not load: CTranslate2 looks for encoder/layer_0.
        problems.append(
            "model.num_encoder_layers=0 (CTranslate2's Transformer needs at least one encoder "
            "layer)"
        )
    return problems


def check_supported(config: ModelConfig) -> None:
    """Raises `UnsupportedModelError` naming every choice CTranslate2 cannot express."""
    problems = unsupported_choices(config)
    if problems:
        raise UnsupportedModelError(
            "This model cannot be exported to CTranslate2: " + "; ".join(problems) + ". "
            "Export it with --format=stablehlo instead, which keeps every choice."
        )


def _linear(spec: Any, weight: np.ndarray, bias: np.ndarray | None) -> None:
    """Fill a CTranslate2 `LinearSpec`: weight (out, in), bias (out,) or none."""
    spec.weight = np.ascontiguousarray(weight, np.float32)
    if bias is not None:
        spec.bias = np.ascontiguousarray(bias, np.float32)


def _heads_in(p: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """A (D, H, K) head projection (and (H, K) bias) -> weight (H·K, D), bias (H·K,)."""
    kernel = np.asarray(p["kernel"])
    d = kernel.shape[0]
    bias = p.get("bias")
    return kernel.reshape(d, -1).T, None if bias is None else np.asarray(bias).reshape(-1)


def _heads_out(p: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """An (H, K, D) output kernel (and (D,) bias) -> weight (D, H·K), bias (D,)."""
    kernel = np.asarray(p["kernel"])
    bias = p.get("bias")
    return kernel.reshape(-1, kernel.shape[-1]).T, None if bias is None else np.asarray(bias)


def _fused(parts: list[tuple[np.ndarray, np.ndarray | None]]):
    """Stack linears along their outputs (CTranslate2's fused QKV / KV projections)."""
    weight = np.concatenate([w for w, _ in parts], axis=0)
    biases = [b for _, b in parts]
    return weight, None if biases[0] is None else np.concatenate(biases, axis=0)


def _attention(spec: Any, p: dict, *, self_attention: bool) -> None:
    q, k, v = (_heads_in(p[name]) for name in ("query", "key", "value"))
    if self_attention:
        _linear(spec.linear[0], *_fused([q, k, v]))
    else:
        _linear(spec.linear[0], *q)
        _linear(spec.linear[1], *_fused([k, v]))
    _linear(spec.linear[-1], *_heads_out(p["out"]))


def _norm(spec: Any, p: dict) -> None:
    spec.gamma = np.asarray(p["scale"], np.float32)
    if "bias" in p:
        spec.beta = np.asarray(p["bias"], np.float32)


def _ffn(spec: Any, p: dict) -> None:
    _linear(spec.linear_0, np.asarray(p["w1"]).T, p.get("b1"))
    _linear(spec.linear_1, np.asarray(p["w2"]).T, p.get("b2"))


def position_table(config: ModelConfig, stack: dict, max_positions: int) -> np.ndarray:
    """(P, D) rows added to the embeddings: the learned table, or our sinusoidal rows."""
    if config.positional == "learned":
        return np.asarray(stack["positions"]["position_embedding"], np.float32)
    import jax.numpy as jnp

    positions = jnp.arange(max_positions, dtype=jnp.int32)
    return np.asarray(ops.sinusoidal_rows(positions, config.model_dim), np.float32)


def _stack(spec: Any, config: ModelConfig, p: dict, embedding: np.ndarray, max_positions: int):
    """Embeddings, positions, blocks and (pre-norm) final norm of an encoder or decoder."""
    embeddings = spec.embeddings if not isinstance(spec.embeddings, list) else spec.embeddings[0]
    embeddings.weight = embedding
    spec.scale_embeddings = True  # ours: Embed multiplies by √D (d2l §11.7.3)
    spec.position_encodings.encodings = position_table(config, p, max_positions)
    if config.norm_placement == "pre":
        _norm(spec.layer_norm, p["final_norm"])
    for i, layer in enumerate(spec.layer):
        block = p[f"block_{i}"]
        _attention(layer.self_attention, block["self_attention"], self_attention=True)
        _norm(layer.self_attention.layer_norm, block["self_attention_residual"]["norm"])
        if "cross_attention" in block:
            _attention(layer.attention, block["cross_attention"], self_attention=False)
            _norm(layer.attention.layer_norm, block["cross_attention_residual"]["norm"])
        _ffn(layer.ffn, block["ffn"])
        _norm(layer.ffn.layer_norm, block["ffn_residual"]["norm"])


def vocabulary(tokenizer: Any) -> list[str]:
    """The tokenizer's token strings in id order; ids 0..3 must be our special tokens."""
    tokens = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]
    if tuple(tokens[:NUM_SPECIAL]) != SPECIAL_TOKENS:
        raise ValueError(
            f"The tokenizer's first tokens are {tokens[:NUM_SPECIAL]}, expected "
            f"{list(SPECIAL_TOKENS)}: it was not built by transformer_jax.data."
        )
    duplicates = len(tokens) - len(set(tokens))
    if duplicates:
        raise ValueError(
            f"The vocabulary has {duplicates} duplicate token string(s): CTranslate2 maps "
            "strings to ids, so every id needs its own string."
        )
    return tokens


def build_spec(
    config: ModelConfig,
    params: Any,
    src_tokens: list[str],
    tgt_tokens: list[str],
    max_positions: int = DEFAULT_MAX_POSITIONS,
):
    """A filled `ctranslate2.specs.TransformerSpec` for our Transformer params."""
    # The [export] extra's library, imported only here: training never needs it.
    import_extra("ctranslate2", NEEDED_BY)
    from ctranslate2.specs import common_spec, transformer_spec

    check_supported(config)
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
    spec = transformer_spec.TransformerSpec.from_config(
        (config.num_encoder_layers, config.num_decoder_layers),
        config.num_heads,
        pre_norm=config.norm_placement == "pre",
        activation=activation[config.activation],
        rms_norm=config.norm_kind == "rms",
    )
    p = _as_numpy(params)
    src_embed = np.asarray(p["src_embed"]["embedding"], np.float32)
    tgt_embed = src_embed if config.share_embeddings else np.asarray(p["tgt_embed"]["embedding"])
    _stack(spec.encoder, config, p["encoder"], src_embed, max_positions)
    _stack(spec.decoder, config, p["decoder"], np.asarray(tgt_embed, np.float32), max_positions)
    if config.tie_output:
        _linear(spec.decoder.projection, tgt_embed, None)
    else:
        dense = p["output"]["dense"]
        _linear(spec.decoder.projection, np.asarray(dense["kernel"]).T, dense["bias"])

    spec.config.layer_norm_epsilon = float(config.norm_eps)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.config.decoder_start_token = BOS
    spec.config.add_source_eos = True  # sources are tokens + <eos>, as in training
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    return spec


def _as_numpy(tree: Any) -> Any:
    """A params pytree (dicts or FrozenDicts of arrays) as nested dicts of numpy arrays."""
    if isinstance(tree, dict) or hasattr(tree, "items"):
        return {k: _as_numpy(v) for k, v in tree.items()}
    return np.asarray(tree)


def convert(
    model: Translator,
    output_dir: str | Path,
    *,
    quantization: str | None = None,
    max_positions: int = DEFAULT_MAX_POSITIONS,
    force: bool = False,
    extra_manifest: dict | None = None,
) -> Path:
    """Write a CTranslate2 model directory for `model` (plus tokenizers and `export.json`).

    model: a `Translator` (`load_trained(workdir)`, or `Translator.from_params` in memory).

    quantization: None/"float32" keeps float32 weights; "int8" etc. are CTranslate2's
      weight quantisations (`ctranslate2.converters.Converter.convert`).
    max_positions: rows of the sinusoidal position table (the longest source and output
      CTranslate2 can then run); a learned table keeps its own `model.max_len`.
    """
    # The [export] extra's library, imported only here: training never needs it.
    import_extra("ctranslate2", NEEDED_BY)
    from ctranslate2.converters.converter import Converter

    if quantization not in (None, *QUANTIZATIONS):
        raise ValueError(
            f"quantization={quantization!r} is not supported; choose one of {list(QUANTIZATIONS)}."
        )
    if quantization in NEEDS_TORCH:
        check_torch(quantization)
    check_supported(model.model_config)
    if max_positions < 1:
        raise ValueError(f"max_positions must be >= 1, got {max_positions}.")
    if model.model_config.positional == "learned":
        max_positions = model.model_config.max_len
    spec = build_spec(
        model.model_config,
        model.params,
        vocabulary(model.src_tokenizer),
        vocabulary(model.tgt_tokenizer),
        max_positions,
    )

    class _SpecConverter(Converter):
        def _load(self):
            return spec

    output_dir = Path(output_dir)
    workdir = (extra_manifest or {}).get("workdir")  # the run exported: never replaced
    with staged_dir(output_dir, force=force, workdir=workdir) as tmp:  # nothing half-written
        _SpecConverter().convert(
            str(tmp),
            quantization=None if quantization == "float32" else quantization,
            force=True,  # tmp is ours (and empty)
        )
        tokenizer_dir = tmp / TOKENIZER_DIR
        model.src_tokenizer.save(tokenizer_dir / SRC_TOKENIZER)
        model.tgt_tokenizer.save(tokenizer_dir / TGT_TOKENIZER)
        if model.text_truecaser is not None:  # translate's natural text (`data.truecasing`)
            model.text_truecaser.save(tokenizer_dir / TRUECASER_FILE)
        manifest = {
            "format": "ctranslate2",
            "quantization": quantization or "float32",
            "max_positions": int(max_positions),
            "source_tokenizer": f"{TOKENIZER_DIR}/{SRC_TOKENIZER}",
            "target_tokenizer": f"{TOKENIZER_DIR}/{TGT_TOKENIZER}",
            "step": model.step,
            **run_manifest(model),
            **(extra_manifest or {}),
            DIGESTS: file_digests(tmp),  # checked when the export is opened (`manifest`)
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return output_dir


def export_ctranslate2(
    workdir: str | Path,
    output_dir: str | Path,
    *,
    quantization: str | None = None,
    max_positions: int = DEFAULT_MAX_POSITIONS,
    step: int | None = None,
    force: bool = False,
) -> Path:
    """Convert the trained model in `workdir` (latest or given step) to `output_dir`."""
    import_extra("ctranslate2", NEEDED_BY)  # before the model is read: fail fast
    if quantization in NEEDS_TORCH:
        check_torch(quantization)
    check_new(output_dir, force, workdir)
    model = load_trained(workdir, step)
    return convert(
        model,
        output_dir,
        quantization=quantization,
        max_positions=max_positions,
        force=force,
        extra_manifest={"workdir": str(Path(workdir).absolute())},
    )


def check_torch(quantization: str) -> None:
    """A `MissingExtraError` if torch, which CTranslate2 converts to `quantization` with, is
    not installed (torch is no part of the [export] extra: too large for one option)."""
    try:
        import_extra("torch", NEEDED_BY)
    except MissingExtraError as error:
        raise MissingExtraError(
            f"--quantization={quantization} needs torch, which CTranslate2's converter casts "
            "the weights with and which is not installed: pip install torch, or choose "
            "float16 or int8 (no torch needed)."
        ) from error


def run_manifest(model: Translator) -> dict[str, Any]:
    """What serving needs from the run: its decoding settings (every key of
    `decoding.defaults.DEFAULTS`: search width, length penalty α, output budget, batch size,
    trained length, how inputs are cut at sentence ends) and preprocessing."""
    decoding = {k: model.settings[k] for k in DEFAULTS}
    manifest = {"decoding": decoding, "book_style": model.book_style}
    if model.book_style:
        manifest["truecaser"] = f"{TOKENIZER_DIR}/{TRUECASER_FILE}"
    return manifest
