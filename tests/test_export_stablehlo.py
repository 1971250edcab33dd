"""StableHLO export: a fresh process with jax, numpy and sentencepiece (not transformer_jax)
reloads the serialised programs and reproduces our search's tokens, for two batch sizes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from configs import fra_eng
from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import data_config
from transformer_jax.data.corpus import read_pairs
from transformer_jax.data.preprocessing import preprocess_nmt
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer
from transformer_jax.data.vocab import EOS_ID, PAD_ID
from transformer_jax.decoding import beam_decode, encode, greedy_decode
from transformer_jax.export import stablehlo
from transformer_jax.inference import Translator
from transformer_jax.testing import random_params, tiny_config

MAX_LEN, BEAM, ALPHA = 12, 3, 0.6

# Runs in a fresh interpreter: only the exported directory, jax, numpy and sentencepiece.
RELOAD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import jax, numpy as np, sentencepiece as spm

    out = Path(sys.argv[1])
    manifest = json.loads((out / "export.json").read_text())
    ids = manifest["special_ids"]
    spm_file = lambda side: str(out / manifest[side]["dir"] / "spm.model")
    src_sp = spm.SentencePieceProcessor(model_file=spm_file("source_tokenizer"))
    tgt_sp = spm.SentencePieceProcessor(model_file=spm_file("target_tokenizer"))
    program = lambda name: jax.export.deserialize(
        bytearray((out / manifest["programs"][name]["file"]).read_bytes()))
    encode, greedy, beam = program("encode"), program("greedy"), program("beam")

    def run(sentences, with_beam=True):
        rows = [src_sp.encode(s) + [ids["eos"]] for s in sentences]
        src = np.full((len(rows), max(map(len, rows))), ids["pad"], np.int32)
        for i, row in enumerate(rows):
            src[i, : len(row)] = row
        src_len = np.array([len(r) for r in rows], np.int32)
        tokens = np.asarray(greedy.call(src, src_len))
        if not with_beam:
            return {"greedy": tokens.tolist()}
        beams, scores = beam.call(src, src_len, np.float32(sys.argv[3]))
        memory = np.asarray(encode.call(src, src_len))
        def text(row):
            row = [int(t) for t in row]
            row = row[: row.index(ids["eos"])] if ids["eos"] in row else row
            return tgt_sp.decode([t for t in row if t not in (ids["pad"], ids["bos"])])
        return {"greedy": tokens.tolist(), "beam": np.asarray(beams).tolist(),
                "scores": np.asarray(scores).tolist(), "memory": memory.tolist(),
                "texts": [text(r) for r in tokens]}

    sentences = json.loads(sys.argv[2])
    result = {"all": run(sentences), "first": run(sentences[:1], with_beam=False),
              "loaded": sorted(m for m in sys.modules if m.split(".")[0] == "transformer_jax")}
    print(json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def model() -> Translator:
    """A random pre-norm model over small SentencePiece vocabularies of the corpus, of a
    book-style run (fra_eng's config: the book's preprocessing, a truecaser)."""
    pairs = list(read_pairs(data_config().zip_path))[:3000]
    english = [preprocess_nmt(p.english) for p in pairs]
    french = [preprocess_nmt(p.french) for p in pairs]
    src = SentencePieceTokenizer.train(english, vocab_size=120)
    tgt = SentencePieceTokenizer.train(french, vocab_size=120)
    cfg = tiny_config(src.vocab_size, tgt.vocab_size, norm_placement="pre")
    config = fra_eng.get_config("runlocal")
    return Translator.from_params(cfg, random_params(cfg, seed=3), src, tgt, config=config)


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("stablehlo") / "hlo"
    return stablehlo.write(model, out, beam_size=BEAM, max_decode_len=MAX_LEN)


def test_reloaded_programs_reproduce_our_search(model, exported, tmp_path):
    out = exported
    sentences = ["go .", "i lost my keys .", "he is very tall , isn't he ?", "hi ."]
    reload = subprocess.run(
        [sys.executable, "-c", RELOAD, str(out), json.dumps(sentences), str(ALPHA)],
        env={**subprocess_env(), "PYTHONPATH": ""},  # this package cannot be imported
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert reload.returncode == 0, reload.stderr[-4000:]
    result = json.loads(reload.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []

    rows = [model.src_tokenizer.encode(s) + [EOS_ID] for s in sentences]
    src = np.full((len(rows), max(map(len, rows))), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        src[i, : len(row)] = row
    src_len = np.array([len(r) for r in rows], np.int32)
    cfg, params = model.model_config, model.params
    greedy = np.asarray(greedy_decode(cfg, params, src, src_len, max_decode_len=MAX_LEN))
    beam = beam_decode(
        cfg, params, src, src_len, beam_size=BEAM, max_decode_len=MAX_LEN, alpha=jnp.float32(ALPHA)
    )
    np.testing.assert_array_equal(result["all"]["greedy"], greedy)
    np.testing.assert_array_equal(result["all"]["beam"], np.asarray(beam.tokens))
    np.testing.assert_allclose(result["all"]["scores"], np.asarray(beam.scores), rtol=1e-5)
    memory = encode(cfg, params, src, src_len)  # (B, S, D)
    np.testing.assert_allclose(result["all"]["memory"], np.asarray(memory), atol=1e-5, rtol=0)
    assert result["all"]["texts"] == [model.tgt_tokenizer.decode(row) for row in greedy]
    # The batch size is symbolic: one sentence alone gives its row of the batch.
    np.testing.assert_array_equal(result["first"]["greedy"], greedy[:1, :])
    assert (greedy != PAD_ID).sum() > 2 * len(sentences)  # outputs, not empty rows


def test_manifest_names_programs_and_shapes(model, exported):
    out = exported
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["programs"]["greedy"]["inputs"] == ["int32[b,s]", "int32[b]"]
    assert manifest["programs"]["beam"]["outputs"] == [
        f"int32[b,{BEAM},{MAX_LEN}]",
        f"float32[b,{BEAM}]",
    ]
    assert manifest["source_tokenizer"]["kind"] == "sentencepiece"
    with pytest.raises(FileExistsError, match="--force"):
        stablehlo.write(model, out)


def test_the_ctranslate2_engine_refuses_a_stablehlo_export_in_one_line(exported):
    """Was `KeyError: 'max_positions'` and a traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "experiments.translate", "--engine=ctranslate2",
         f"--model_dir={exported}", "go ."],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.startswith("FATAL: ") and result.stderr.count("\n") == 1, result.stderr
    assert "holds a 'stablehlo' export, not a CTranslate2 one" in result.stderr
    assert result.stdout == ""


def test_the_manifest_lists_exactly_the_files_the_export_ships(model, exported):
    """Every path export.json names exists, and every file shipped is export.json or one of
    them (a file, or a tokenizer directory). It named tokenizer/truecaser.json unwritten."""
    manifest = json.loads((exported / "export.json").read_text())
    assert model.book_style and manifest["book_style"]
    named = [program["file"] for program in manifest["programs"].values()]
    named += [manifest[side]["dir"] for side in ("source_tokenizer", "target_tokenizer")]
    named.append(manifest["truecaser"])
    assert all((exported / path).exists() for path in named), named
    shipped = [p.relative_to(exported) for p in exported.rglob("*") if p.is_file()]
    listed = [Path(path) for path in named]
    unlisted = [
        p for p in shipped
        if p != Path("export.json") and not any(p == n or n in p.parents for n in listed)
    ]  # fmt: skip
    assert unlisted == [] and len(shipped) > len(named)


def test_the_workspace_reload_example_translates_as_our_translator(model, exported, tmp_path):
    """WORKSPACE.md's "Reload a StableHLO export" block, run as written in a process that
    cannot import this package: raw text in, the same beam translations as the Translator's
    (the export's beam size, output length and the run's α), so the doc cannot rot."""
    doc = (REPO / "WORKSPACE.md").read_text()
    block = re.search(r"#### Reload a StableHLO export\n.*?```python\n(.*?)```", doc, re.S)
    assert block, "WORKSPACE.md lost its StableHLO reload example"
    raw = ["Go.", "I lost my keys!", "He is very tall, isn't he?", "Hi."]
    result = subprocess.run(
        [sys.executable, "-c", block.group(1), str(exported), *raw],
        env={**subprocess_env(), "PYTHONPATH": ""}, capture_output=True, text=True,
        timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    prepared = [model.prepare(s) for s in raw]
    ours = model.translate(prepared, beam_size=BEAM, max_decode_len=MAX_LEN)
    assert result.stdout.splitlines() == [f"{s}\t{t}" for s, t in zip(raw, ours, strict=True)]
    assert sum(bool(t) for t in ours) >= 2  # texts, not only empty rows
