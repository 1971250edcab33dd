"""Serialise encode, greedy search and beam search as StableHLO programs (`jax.export`).

    export_stablehlo(workdir, "model_hlo", beam_size=4, max_decode_len=64)

writes, with the parameters baked into each program as constants:

    encode.bin   (src (B, S) int32, src_len (B,) int32) -> memory (B, S, D) float32
    greedy.bin   (src, src_len) -> tokens (B, L) int32
    beam.bin     (src, src_len, alpha () float32) -> tokens (B, W, L) int32, scores (B, W)
    tokenizer/source, tokenizer/target    the tokenizers (vocab.txt or spm.model)
    tokenizer/truecaser.json              a book-style run's truecaser (natural text)
    export.json  the manifest: files, shapes, special ids, L, W, preprocessing, and the
                 sha256 of every other file ("sha256", `manifest.file_digests`)

Each program holds its own copy of the parameters (three copies on disk; fine for the
models here, a params argument would suit a large one). B and S are symbolic
(`jax.export.symbolic_shape("b, s")`): one program serves every batch size and source
length (XLA compiles per concrete shape on load). L (tokens generated, `<eos>` included)
and W are fixed at export. Sources are token ids + `<eos>`, padded with
`<pad>` = 0; outputs keep `<eos>`, then `<pad>`. A process that reads the directory needs
jax and numpy (and sentencepiece for a SentencePiece vocabulary), not this package:

    exp = jax.export.deserialize(bytearray(open("model_hlo/greedy.bin", "rb").read()))
    tokens = exp.call(src, src_len)

WORKSPACE.md ("Reload a StableHLO export") has the whole program, from raw text to text
(tests/test_export_stablehlo.py runs it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformer_jax.data.truecasing import TRUECASER_FILE
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_jax.decoding import beam_decode, encode, greedy_decode
from transformer_jax.export.ctranslate2 import (
    SRC_TOKENIZER,
    TGT_TOKENIZER,
    TOKENIZER_DIR,
    run_manifest,
)
from transformer_jax.export.extras import import_extra
from transformer_jax.export.manifest import DIGESTS, MANIFEST, file_digests
from transformer_jax.export.staging import check_new, staged_dir
from transformer_jax.export.trained_model import load_trained
from transformer_jax.inference import Translator

DEFAULT_MAX_DECODE_LEN = 64
DEFAULT_BEAM_SIZE = 4
NEEDED_BY = "export to StableHLO (--format=stablehlo)"  # what a missing extra stops


def exported_programs(model: Translator, *, beam_size: int, max_decode_len: int) -> dict:
    """{"encode" | "greedy" | "beam": jax.export.Exported} over symbolic (b, s) sources."""
    import jax
    import jax.numpy as jnp
    from jax import export

    cfg, params = model.model_config, model.params
    b, s = export.symbolic_shape("b, s")
    src = jax.ShapeDtypeStruct((b, s), jnp.int32)
    src_len = jax.ShapeDtypeStruct((b,), jnp.int32)
    alpha = jax.ShapeDtypeStruct((), jnp.float32)

    def encode_fn(src, src_len):
        return encode(cfg, params, src, src_len)  # (B, S, D)

    def greedy_fn(src, src_len):
        return greedy_decode(cfg, params, src, src_len, max_decode_len=max_decode_len)

    def beam_fn(src, src_len, alpha):
        result = beam_decode(
            cfg, params, src, src_len, beam_size=beam_size, max_decode_len=max_decode_len,
            alpha=alpha,
        )  # fmt: skip
        return result.tokens, result.scores

    return {
        "encode": export.export(jax.jit(encode_fn))(src, src_len),
        "greedy": export.export(jax.jit(greedy_fn))(src, src_len),
        "beam": export.export(jax.jit(beam_fn))(src, src_len, alpha),
    }


def write(
    model: Translator,
    output_dir: str | Path,
    *,
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_decode_len: int = DEFAULT_MAX_DECODE_LEN,
    force: bool = False,
    extra_manifest: dict | None = None,
) -> Path:
    """Write the three programs, the tokenizers and `export.json` for `model` (into a
    temporary sibling folder renamed to `output_dir` once all is written)."""
    if beam_size < 1 or max_decode_len < 1:
        raise ValueError(
            f"beam_size and max_decode_len must be >= 1, got {beam_size} and {max_decode_len}."
        )
    # jax.export serialises with flatbuffers, an optional library (the [export] extra).
    import_extra("flatbuffers", NEEDED_BY)
    workdir = (extra_manifest or {}).get("workdir")  # the run exported: never replaced
    output_dir = check_new(output_dir, force, workdir)
    programs = exported_programs(model, beam_size=beam_size, max_decode_len=max_decode_len)
    with staged_dir(output_dir, force=force, workdir=workdir) as tmp:
        _write_files(model, tmp, programs, beam_size, max_decode_len, extra_manifest or {})
    return output_dir


def _write_files(
    model: Translator,
    output_dir: Path,
    programs: dict,
    beam_size: int,
    max_decode_len: int,
    extra_manifest: dict,
) -> None:
    files = {}
    for name, exp in programs.items():
        (output_dir / f"{name}.bin").write_bytes(exp.serialize())
        files[name] = {
            "file": f"{name}.bin",
            "inputs": [str(a) for a in exp.in_avals],
            "outputs": [str(a) for a in exp.out_avals],
        }
    model.src_tokenizer.save(output_dir / TOKENIZER_DIR / SRC_TOKENIZER)
    model.tgt_tokenizer.save(output_dir / TOKENIZER_DIR / TGT_TOKENIZER)
    if model.text_truecaser is not None:  # natural text, named in the manifest (run_manifest)
        model.text_truecaser.save(output_dir / TOKENIZER_DIR / TRUECASER_FILE)
    manifest = {
        "format": "stablehlo",
        "programs": files,
        "beam_size": beam_size,
        "max_decode_len": max_decode_len,
        "alpha": float(model.settings["alpha"]),
        "special_ids": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID},
        "source_tokenizer": _tokenizer_entry(SRC_TOKENIZER, model.src_tokenizer),
        "target_tokenizer": _tokenizer_entry(TGT_TOKENIZER, model.tgt_tokenizer),
        "step": model.step,
        **run_manifest(model),
        **extra_manifest,
        DIGESTS: file_digests(output_dir),
    }  # fmt: skip
    (output_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _tokenizer_entry(name: str, tokenizer: Any) -> dict[str, str]:
    """Where a tokenizer is saved and what it is: "word" (vocab.txt, one token per line,
    line i = id i) or "sentencepiece" (spm.model, ids as SentencePiece numbers them)."""
    return {"dir": f"{TOKENIZER_DIR}/{name}", "kind": tokenizer.kind}


def export_stablehlo(
    workdir: str | Path,
    output_dir: str | Path,
    *,
    beam_size: int = DEFAULT_BEAM_SIZE,
    max_decode_len: int = DEFAULT_MAX_DECODE_LEN,
    step: int | None = None,
    force: bool = False,
) -> Path:
    """Export the trained model in `workdir` (latest or given step) to `output_dir`."""
    import_extra("flatbuffers", NEEDED_BY)  # before the model is read: fail fast
    check_new(output_dir, force, workdir)
    model = load_trained(workdir, step)
    return write(
        model, output_dir, beam_size=beam_size, max_decode_len=max_decode_len, force=force,
        extra_manifest={"workdir": str(Path(workdir).absolute())},
    )  # fmt: skip
