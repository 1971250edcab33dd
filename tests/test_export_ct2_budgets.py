"""The CTranslate2 engine's output budgets and search rules, as the JAX engine's: each row its
own budget (a sentence translates the same alone or beside longer ones), capped as ours,
outputs cut by their budget noted; `<eos>` never first, `<pad>`/`<bos>` never written."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.helpers import float32_matmuls
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.export import convert
from transformer_jax.export.ct2_translate import translate_detailed
from transformer_jax.inference import Translator
from transformer_jax.inference.notes import output_notes
from transformer_jax.testing import random_params, tiny_config

pytestmark = pytest.mark.usefixtures(float32_matmuls.__name__)
ctranslate2 = pytest.importorskip("ctranslate2")

WORDS = [f"w{i}" for i in range(20)]
TOKENIZER = WordTokenizer([*SPECIAL_TOKENS, *WORDS])
# The README budget a·S + b = 2·S + 10, trained on sources of up to 8 tokens: no output
# beyond the budget of 4 x 8 = 32 tokens, 2·32 + 10 -> 80 (`output_cap`).
SETTINGS = dict(max_decode_len=None, max_len_a=2.0, max_len_b=10, trained_len=8, segment_len=0)


def sentence(n: int, offset: int = 0) -> str:
    return " ".join(WORDS[(offset + k) % len(WORDS)] for k in range(n))


def export(tmp_path_factory, name: str, params_of=lambda cfg: random_params(cfg, seed=3)):
    """(the JAX translator, its CTranslate2 export's directory, an open translator)."""
    cfg = tiny_config(TOKENIZER.vocab_size, TOKENIZER.vocab_size)
    model = Translator.from_params(cfg, params_of(cfg), TOKENIZER, TOKENIZER, **SETTINGS)
    path = tmp_path_factory.mktemp(name) / "model"
    convert(model, path)
    return model, path, ctranslate2.Translator(str(path), intra_threads=1)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """A random model: it rarely says `<eos>`, so outputs run to their budget."""
    return export(tmp_path_factory, "random")


def biased(token: int):
    """Random parameters whose output bias makes `token` the first choice at every step."""

    def params_of(cfg):
        params = jax.tree.map(np.array, random_params(cfg, seed=3))
        leaves = [x for x in jax.tree.leaves(params) if x.shape == (cfg.tgt_vocab_size,)]
        assert leaves, "no output bias of the vocabulary's size"
        for bias in leaves:
            bias[token] += 50.0
        return params

    return params_of


@pytest.mark.parametrize(
    "options", [{"beam_size": 1}, {"beam_size": 3}, {"beam_size": 3, "nbest": 2}]
)
def test_a_sentence_translates_the_same_alone_and_beside_long_ones(engines, options):
    model, path, translator = engines
    short = "w3"  # budget 2·8 + 10 -> 32 alone; a batch's 40 tokens would have given 96
    lines = [short, sentence(39, 1), sentence(30, 2), "w4 w5"]
    alone = translate_detailed(path, [short], translator=translator, **options)
    together = translate_detailed(path, lines, translator=translator, **options)
    assert together.texts[0] == alone.texts[0]
    # Not vacuous: the short one's output runs to its own budget, 32 tokens, cut (a note).
    assert len(alone.texts[0].split()) == 32 and alone.unfinished == {0: 32}
    # Each row's budget is the JAX engine's: the same outputs, the same cut notes.
    ours = model.translate_detailed(lines, warn=False, **options)
    assert together.texts == ours.texts
    assert together.unfinished == ours.unfinished
    notes = together.notes()
    assert notes[-len(ours.unfinished) :] == output_notes(ours.unfinished)


def test_outputs_are_capped_as_the_jax_engines(engines):
    model, path, translator = engines
    long = sentence(60)  # 61 tokens with <eos>: 2·64 + 10 -> 144, capped at 80
    out = translate_detailed(path, [long], translator=translator)
    assert len(out.texts[0].split()) == 80 and out.unfinished == {0: 80}
    assert out.texts == model.translate_detailed([long], warn=False).texts


@pytest.mark.parametrize("token", [EOS_ID, PAD_ID, BOS_ID])
def test_eos_never_first_and_pad_or_bos_never_written(tmp_path_factory, token):
    """A model whose first choice at every step is `token`: with `<eos>`, every output would
    be empty; with `<pad>` or `<bos>`, written (and an empty line once stripped)."""
    model, path, translator = export(tmp_path_factory, f"first_{token}", biased(token))
    lines = ["w1", "w2 w3"]
    for options in ({"beam_size": 1}, {"beam_size": 3}, {"beam_size": 3, "nbest": 3}):
        out = translate_detailed(path, lines, translator=translator, scores=True, **options)
        assert all(out.texts), (token, options, out.texts)
        for hyps in out.hypotheses:
            assert all(hyps.texts) and not any(
                special in text for text in hyps.texts for special in ("<pad>", "<bos>")
            )
        if options == {"beam_size": 1}:  # the JAX engine's choices (beam search may rank
            # differently: CTranslate2 renormalises over the tokens left, see RULED_OUT)
            assert out.texts == model.translate_detailed(lines, warn=False, **options).texts
    if token == EOS_ID:  # <eos> is the model's choice from the second token on
        greedy = translate_detailed(path, lines, translator=translator, beam_size=1)
        assert [len(t.split()) for t in greedy.texts] == [1, 1]
    # An empty source still gets an empty translation.
    assert translate_detailed(path, [""], translator=translator).texts == [""]
