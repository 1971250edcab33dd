"""CTranslate2 export: the same log-probabilities for every architecture choice it can
express, a clear error for those it cannot, and the same greedy and beam-4 outputs as our
JAX search on a tiny trained run."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import (
    MATMUL_PRECISION,
    REPO,
    finish,
    float32_matmuls,
    launch,
    subprocess_env,
)
from transformer_jax.data.config import data_config
from transformer_jax.data.corpus import read_pairs
from transformer_jax.data.encoding import encode_text
from transformer_jax.data.preprocessing import preprocess_nmt
from transformer_jax.data.segmenting import segment
from transformer_jax.data.vocab import EOS_ID, PAD_ID, SPECIAL_TOKENS
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.decoding import beam_decode, greedy_decode
from transformer_jax.decoding.defaults import DEFAULTS
from transformer_jax.export import UnsupportedModelError, convert, load_trained
from transformer_jax.export.ct2_translate import (
    load_truecaser,
    translate_detailed,
    translate_lines,
)
from transformer_jax.export.ctranslate2 import MANIFEST
from transformer_jax.inference import Translator
from transformer_jax.nn import Transformer
from transformer_jax.testing import random_params, tiny_config

# CTranslate2's float32 on CPU, token for token: float32 matmuls on every backend.
pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)

ctranslate2 = pytest.importorskip("ctranslate2")

VOCAB = 40
WORDS = WordTokenizer([*SPECIAL_TOKENS, *(f"w{i}" for i in range(VOCAB - len(SPECIAL_TOKENS)))])

# Each case turns on choices the converter maps differently (defaults: post-norm layer
# norm, ReLU, sinusoidal positions, separate embeddings and output projection, biases).
CASES = {
    "post": {},
    "pre_rms_gelu": dict(norm_placement="pre", norm_kind="rms", activation="gelu", norm_eps=1e-3),
    "learned_shared_tied_nobias": dict(
        positional="learned", max_len=48, share_embeddings=True, tie_output=True, use_bias=False
    ),
}


def random_model(**choices) -> Translator:
    cfg = tiny_config(VOCAB, VOCAB, **choices)
    return Translator.from_params(cfg, random_params(cfg, seed=1), WORDS, WORDS)


def strip(row) -> list[int]:
    """Generated ids before `<eos>`; a row without `<eos>` holds L generated ids, all kept
    (a generated `<pad>` is a token like any other, for both engines)."""
    row = [int(t) for t in row]
    return row[: row.index(EOS_ID)] if EOS_ID in row else row


def padded(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(B, S) ids padded with `<pad>` and (B,) lengths."""
    out = np.full((len(rows), max(map(len, rows))), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out, np.array([len(r) for r in rows], np.int32)


@pytest.mark.parametrize("case", sorted(CASES))
def test_log_probabilities_match(case, tmp_path):
    """Teacher-forced log P of every target token (`<eos>` included) agree within 1e-4."""
    model = random_model(**CASES[case])
    convert(model, tmp_path / "ct2")
    rng = np.random.default_rng(0)
    src = [list(rng.integers(4, VOCAB, n)) for n in (3, 9, 1, 6)]
    tgt = [list(rng.integers(4, VOCAB, n)) for n in (5, 2, 7, 4)]

    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    words = lambda ids: [WORDS.id_to_token(int(t)) for t in ids]  # noqa: E731
    scored = translator.score_batch([words(s) for s in src], [words(t) for t in tgt])

    src_ids, src_len = padded([[*s, EOS_ID] for s in src])
    tgt_in, _ = padded([[1, *t] for t in tgt])  # <bos> + target
    # One jitted program: op-by-op dispatch of the model compiles each op on its own.
    apply = jax.jit(Transformer(model.model_config).apply)
    logits = apply({"params": model.params}, src_ids, src_len, tgt_in)  # (B, T, V)
    logp = np.asarray(jax.nn.log_softmax(logits))
    for i, t in enumerate(tgt):
        ours = logp[i, np.arange(len(t) + 1), [*t, EOS_ID]]
        assert scored[i].tokens == [*words(t), "<eos>"]
        np.testing.assert_allclose(scored[i].log_probs, ours, atol=1e-4, rtol=0)


def test_unsupported_choices_are_named():
    cfg = random_model().model_config.replace(norm_placement="rezero", attention_kind="additive")
    model = Translator.from_params(cfg, None, WORDS, WORDS)  # refused before params are read
    with pytest.raises(UnsupportedModelError, match=r"rezero.*additive.*stablehlo"):
        convert(model, "/nonexistent/never_written")
    cfg = cfg.replace(num_encoder_layers=0, norm_placement="pre", attention_kind="dot")
    no_encoder = Translator.from_params(cfg, None, WORDS, WORDS)
    with pytest.raises(UnsupportedModelError, match=r"num_encoder_layers=0"):
        convert(no_encoder, "/nonexistent/never_written")


# --- a tiny trained run ----------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("export") / "run"
    # Longer than the shared tiny run, so that the model says more than "je suis <unk> .";
    # the same compiled step, fewer checkpoints and evaluations.
    steps = ("--config.num_train_steps=600", "--config.checkpoint_every_steps=600")
    finish(launch(workdir, *steps, "--config.eval_every_steps=600"))
    return workdir


def corpus_sources(count: int) -> list[str]:
    """`count` preprocessed English sentences spread over the corpus's first 3,000 lines
    (the short sentences the tiny model was trained on)."""
    pairs = list(read_pairs(data_config().zip_path))[:3000]
    step = len(pairs) // count
    return [preprocess_nmt(pairs[i * step].english) for i in range(count)]


def search_outputs(model, translator, ids: list[list[int]], max_len: int, beam_size: int):
    """(ours, theirs): each a list of generated ids before `<eos>`, from our jitted search
    (α = 0) and from CTranslate2 (length_penalty = 0), for sources `ids` (without `<eos>`)."""
    src, src_len = padded([[*x, EOS_ID] for x in ids])
    cfg, params = model.model_config, model.params
    if beam_size == 1:
        ours = greedy_decode(cfg, params, src, src_len, max_decode_len=max_len)
    else:
        ours = beam_decode(
            cfg, params, src, src_len, beam_size=beam_size, max_decode_len=max_len,
            alpha=jnp.float32(0),
        ).tokens[:, 0]  # fmt: skip
    results = translator.translate_batch(
        [[model.src_tokenizer.id_to_token(t) for t in x] for x in ids],
        beam_size=beam_size,
        length_penalty=0.0,
        max_decoding_length=max_len,
        min_decoding_length=0,  # ours may end at once too
        max_input_length=0,  # never cut a source
    )
    theirs = [[model.tgt_tokenizer.token_to_id(t) for t in r.hypotheses[0]] for r in results]
    return [strip(row) for row in np.asarray(ours)], theirs


def test_random_pre_norm_model_search_matches(tmp_path):
    """Pre-norm, RMS norm, GELU: greedy and beam-4 outputs equal token for token on 120
    random sources. Random weights rarely pick `<eos>`, so most outputs run the full 20
    tokens: long hypotheses, where any drift in the decoder state would show."""
    model = random_model(**CASES["pre_rms_gelu"])
    convert(model, tmp_path / "ct2")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    rng = np.random.default_rng(1)
    ids = [list(map(int, rng.integers(4, VOCAB, n))) for n in rng.integers(1, 12, 120)]
    for beam_size in (1, 4):
        ours, theirs = search_outputs(model, translator, ids, 20, beam_size)
        assert ours == theirs, f"beam_size={beam_size}"
        assert np.mean([len(r) for r in ours]) > 8


@pytest.mark.slow  # trains for real
def test_trained_model_greedy_and_beam_equal_jax_search(trained, tmp_path):
    """CTranslate2 float32 = our search, token for token, on 150 sentences (greedy, beam 4).

    α = 0 on our side and length_penalty = 0 on CTranslate2's: both then return the most
    probable hypothesis their beams reach. The two beam searches differ in bookkeeping
    (CTranslate2 refills a finished beam's slot from 2W candidates; ours lets it go), but
    with log P only falling as a hypothesis grows, a refilled hypothesis never outscores
    the finished one whose slot it took, so the best hypothesis is the same.
    """
    # The int8 export through the launcher runs beside the JAX decoding.
    int8_dir = tmp_path / "ct2_int8"
    cli = subprocess.Popen(
        [sys.executable, "-m", "experiments.export", f"--workdir={trained}",
         "--format=ctranslate2", f"--output_dir={int8_dir}", "--quantization=int8"],
        cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    model = load_trained(trained)
    convert(model, tmp_path / "ct2")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    sentences = corpus_sources(150)
    ids = [model.src_tokenizer.encode(s) for s in sentences]
    max_len = 2 * max(map(len, ids)) + 12
    greedy, greedy_ct2 = search_outputs(model, translator, ids, max_len, 1)
    beam, beam_ct2 = search_outputs(model, translator, ids, max_len, 4)
    assert greedy == greedy_ct2
    assert beam == beam_ct2
    assert len(set(map(tuple, greedy))) >= 8  # a model that answers, not one output for all
    assert sum(g != b for g, b in zip(greedy, beam, strict=True)) >= 10  # beams at work

    # The serving function gives the same text (its own budget and grouping).
    texts = [model.tgt_tokenizer.decode([*row, EOS_ID]) for row in greedy]
    assert translate_lines(tmp_path / "ct2", sentences) == texts
    # Raw input gets the run's preprocessing; an empty line gives an empty translation.
    raw = translate_lines(tmp_path / "ct2", ["Go.", "", "go ."], translator=translator)
    assert raw[0] == raw[2] and raw[1] == ""
    # The run's beam size is the serving default, as in the JAX engine (this run's is 1).
    manifest_path = tmp_path / "ct2" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    assert manifest["decoding"]["beam_size"] == 1
    assert manifest["decoding"]["segment_len"] == 1  # the run's eval.segment_len
    manifest["decoding"]["beam_size"] = 4
    manifest_path.write_text(json.dumps(manifest))
    run_default = translate_lines(tmp_path / "ct2", sentences, translator=translator)
    beam_texts = translate_lines(tmp_path / "ct2", sentences, beam_size=4, translator=translator)
    assert run_default == beam_texts != texts
    assert translate_lines(tmp_path / "ct2", sentences, beam_size=1, translator=translator) == texts

    output = finish(cli, timeout=120)
    assert "Exported" in output
    assert (int8_dir / "model.bin").stat().st_size < (tmp_path / "ct2" / "model.bin").stat().st_size
    int8_texts = translate_lines(int8_dir, sentences)
    assert sum(a == b for a, b in zip(int8_texts, texts, strict=True)) > len(texts) // 2


def test_translate_command_with_the_ctranslate2_engine_matches_the_jax_engine(trained, tmp_path):
    """`experiments.translate --engine=ctranslate2` reads and writes as the JAX engine does:
    one line per input line (an empty one for an empty input), the same beam-4 texts at the
    run's α, a paragraph cut at the same sentence ends, and the same notes on stderr (inputs
    longer than the training sources, words read as `<unk>`), numbered from 1."""
    model = load_trained(trained)
    convert(model, tmp_path / "ct2")
    paragraph = " ".join(corpus_sources(40)[::4])  # 10 sentences
    parts = segment(paragraph, lambda t: len(encode_text(model.src_tokenizer, t)), 1)
    assert len(parts) >= 10
    lines = [*corpus_sources(6), paragraph, "", "Go.", "Zyxwv, I think you should go home now."]
    text = "\n".join(lines) + "\n"

    # The JAX engine runs in a subprocess, out of the fixture's reach: pinned by JAX's flag.
    env = {**subprocess_env(), "JAX_DEFAULT_MATMUL_PRECISION": MATMUL_PRECISION}

    def translate(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "experiments.translate", "--beam_size=4", *flags],
            input=text, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    ct2 = translate("--engine=ctranslate2", f"--model_dir={tmp_path / 'ct2'}")
    jax_engine = translate(f"--workdir={trained}")
    assert ct2.returncode == 0 and jax_engine.returncode == 0, ct2.stderr + jax_engine.stderr
    assert ct2.stdout == jax_engine.stdout
    notes = [line for line in ct2.stderr.splitlines() if line.startswith("note: ")]
    assert notes == [line for line in jax_engine.stderr.splitlines() if line.startswith("note: ")]
    assert any("'zyxwv'" in n and "read as <unk>" in n for n in notes)
    assert any(n.startswith(f"note: sentence {len(lines)} has") for n in notes)  # from 1
    assert any("more than the longest the model was trained on" in n for n in notes)
    outputs = ct2.stdout.split("\n")
    assert len(outputs) == len(lines) + 1 and outputs[-4] == "" and outputs[0]
    # Printed as natural text by both engines (the run's truecaser, exported beside the
    # model); --text=data prints the model's own form.
    part_texts = translate_lines(tmp_path / "ct2", parts, beam_size=4)
    truecaser = load_truecaser(tmp_path / "ct2")
    assert truecaser == model.truecaser and truecaser.forms
    assert outputs[6] == truecaser.natural(" ".join(t for t in part_texts if t), paragraph)
    data = translate("--engine=ctranslate2", f"--model_dir={tmp_path / 'ct2'}", "--text=data")
    texts = translate_lines(tmp_path / "ct2", lines, beam_size=4)
    assert data.stdout.split("\n")[:-1] == [t.strip() for t in texts]
    assert data.stdout != ct2.stdout

    refused = translate("--engine=ctranslate2", f"--model_dir={tmp_path / 'ct2'}", "--step=3")
    assert refused.returncode == 2
    assert refused.stderr.startswith("FATAL: --step applies to --engine=jax only")


def test_beam_search_at_the_runs_alpha_equals_the_jax_engine(trained, tmp_path):
    """Beam 4 at the run's α (0.6, recorded in export.json): the CTranslate2 engine's
    texts equal the JAX engine's on 300 corpus sentences, long and short, token for token
    (float32 both); and at α = 0 too. The engine before (CTranslate2's search with its length
    penalty 0) gave 885 of 1,000 such sentences; the α must matter on this set: the JAX
    engine's own texts at 0.6 and at 0 differ on some."""
    model = load_trained(trained)
    convert(model, tmp_path / "ct2")
    decoding = json.loads((tmp_path / "ct2" / MANIFEST).read_text())["decoding"]
    assert decoding == {key: model.settings[key] for key in DEFAULTS}
    assert decoding["alpha"] == 0.6
    pairs = list(read_pairs(data_config().zip_path))
    raw = [pair.english for pair in pairs[:: len(pairs) // 300]][:300]
    prepared = [model.prepare(s) for s in raw]
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    ours = model.translate(prepared, beam_size=4)  # the run's alpha
    theirs = translate_lines(tmp_path / "ct2", raw, beam_size=4, translator=translator)
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) == len(raw)
    ours_0 = model.translate(prepared, beam_size=4, alpha=0.0)
    theirs_0 = translate_lines(tmp_path / "ct2", raw, beam_size=4, alpha=0.0, translator=translator)
    assert theirs_0 == ours_0
    assert sum(a != b for a, b in zip(ours, ours_0, strict=True)) >= 10
    assert len(set(ours)) >= 15  # not one answer for all (the tiny model knows few words)


def test_a_line_longer_than_the_position_table_is_translated_with_a_note(trained, tmp_path):
    """A 5,000-word line of one sentence (no sentence end to cut at) among ordinary ones:
    the export's position table has 1,024 rows, so the CTranslate2 engine translates that line
    in parts that fit it and says so on stderr, numbering lines from 1; the other lines come
    out as they do alone (it refused the whole file before: FATAL, no output)."""
    model = load_trained(trained)
    convert(model, tmp_path / "ct2")
    words = [w for s in corpus_sources(50) for w in s.split() if w.isalpha()]  # no "." or "!"
    long_line = " ".join(words[i % len(words)] for i in range(5000))
    lines = ["go .", long_line, "i lost ."]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "experiments.translate", "--engine=ctranslate2", "--text=data",
         f"--model_dir={tmp_path / 'ct2'}", f"--input_file={tmp_path / 'in.txt'}"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = result.stdout.split("\n")[:-1]
    alone = translate_lines(tmp_path / "ct2", [lines[0], lines[2]])
    assert len(outputs) == 3 and [outputs[0], outputs[2]] == alone and outputs[1]
    tokens = len(model.src_tokenizer.encode(long_line)) + 1
    out = translate_detailed(tmp_path / "ct2", lines)
    assert out.texts == outputs and out.cut == {1: tokens} and tokens > 5000
    note = (
        f"note: sentence 2 has {tokens} tokens, more than the export's position table "
        "(1024 rows): translated in parts"
    )
    assert out.notes()[0].startswith(note) and out.notes(first_number=5)[0].startswith(
        note.replace("sentence 2", "sentence 6")
    )
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert notes == out.notes() and not any("sentence 1 " in n for n in notes)
