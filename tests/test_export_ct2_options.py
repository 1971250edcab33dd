"""The CTranslate2 engine's decoding options (issue 41, deliverable 3): n-best with scores,
seeded sampling and forced prefixes mapped onto CTranslate2's, checked against the JAX
engine on a random-initialised export; an ensemble is one FATAL line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO, float32_matmuls, subprocess_env
from transformer_jax.data.vocab import SPECIAL_TOKENS
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.decoding.options import DecodeOptions
from transformer_jax.export import convert
from transformer_jax.export.ct2_translate import ENSEMBLE_ERROR, translate_detailed
from transformer_jax.inference import Translator
from transformer_jax.testing import random_params, tiny_config

pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)
ctranslate2 = pytest.importorskip("ctranslate2")

WORDS = WordTokenizer([*SPECIAL_TOKENS, *(f"w{i}" for i in range(29)), "."])
# The last line is cut at its sentence end (n-best: its parts' best combinations).
LINES = ["w1 w2 w3", "w4 w5", "", "w7 w8 w9 w10 w11", "w12 w13", "w1 w2 . w3 w4 w5 ."]
BUDGET = dict(max_decode_len=8)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """(the JAX translator, the export's directory, an open ctranslate2.Translator)."""
    cfg = tiny_config(len(SPECIAL_TOKENS) + 30, len(SPECIAL_TOKENS) + 30)
    model = Translator.from_params(
        cfg, random_params(cfg, seed=3, bias_std=0.0), WORDS, WORDS, **BUDGET
    )
    path = tmp_path_factory.mktemp("ct2") / "model"
    convert(model, path)
    return model, path, ctranslate2.Translator(str(path), intra_threads=1)


def ct2(engines, lines=LINES, **options):
    _, path, translator = engines
    return translate_detailed(path, lines, translator=translator, scores=True, **BUDGET, **options)


def test_nbest_and_greedy_scores_match_the_jax_engine(engines):
    model = engines[0]
    for beam, nbest in ((1, 1), (4, 2)):
        ours = model.translate_options(LINES, DecodeOptions(beam_size=beam, nbest=nbest))
        theirs = ct2(engines, beam_size=beam, nbest=nbest).hypotheses
        assert [h.best for h in theirs] == [h.best for h in ours]
        for a, b in zip(ours, theirs, strict=True):
            assert len(b.texts) == len(a.texts)
            assert list(b.scores) == sorted(b.scores, reverse=True)
            for text, lp in zip(b.texts, b.log_probs, strict=True):
                if text in a.texts:  # the same hypothesis: the same log P
                    assert lp == pytest.approx(a.log_probs[a.texts.index(text)], abs=1e-3)
    assert ct2(engines, beam_size=4, nbest=2).hypotheses[2].texts == ("",)


def test_prefix_is_forced(engines):
    model = engines[0]
    out = ct2(engines, prefix="w20 w21")
    assert all(t.startswith("w20 w21") for i, t in enumerate(out.texts) if LINES[i])
    free = model.translate(LINES)
    words = free[3].split()
    again = ct2(engines, lines=LINES[3:4], prefix=" ".join(words[:2]))
    assert again.texts == free[3:4]
    jax_forced = model.translate(LINES, prefix="w20 w21")
    assert out.texts == jax_forced


def test_sampling_is_seeded(engines):
    draw = lambda seed, **kw: ct2(engines, temperature=2.0, nbest=3, seed=seed, **kw).hypotheses
    first = draw(1)
    assert draw(1) == first and draw(2) != first
    assert [len(h.texts) for h in first] == [3, 3, 1, 3, 3, 3]
    assert any(len(set(h.texts)) > 1 for h in first)
    greedy = engines[0].translate(LINES)
    assert [h.texts[0] for h in draw(5, top_k=1)] == greedy  # top-1 sampling is greedy


@pytest.mark.parametrize("launcher", ["translate", "serve"])
def test_an_ensemble_is_one_fatal_line(engines, launcher):
    path = engines[1]
    out = subprocess.run(
        [sys.executable, "-m", f"experiments.{launcher}", "--engine=ctranslate2",
         f"--model_dir={path},{path}", *(["go ."] if launcher == "translate" else [])],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == f"FATAL: {ENSEMBLE_ERROR}."


def test_the_tokenizers_are_read_once_while_the_export_is_unchanged(engines, monkeypatch):
    """A server calls translate_detailed per request: reading the two tokenizers took 5.1 of
    a one-line call's 7.0 ms. A tokenizer written again in its place is read again."""
    import os

    from transformer_jax.export import ct2_translate

    reads = []
    real = ct2_translate.load_tokenizer
    monkeypatch.setattr(ct2_translate, "load_tokenizer", lambda d: reads.append(d) or real(d))
    first = ct2(engines)
    assert ct2(engines).texts == first.texts
    sides = len(reads)  # the first call's (none if an earlier test read them already)
    assert sides <= 2 and ct2(engines).texts == first.texts and len(reads) == sides
    _, path, _ = engines
    meta = next((path / "tokenizer").rglob("tokenizer.json"))
    os.utime(meta, ns=(meta.stat().st_atime_ns, meta.stat().st_mtime_ns + 10**9))
    assert ct2(engines).texts == first.texts and len(reads) == sides + 1
