"""`decoding.translate` and `attention_weights` on text, with a stub word tokenizer."""

import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import random_params
from transformer_jax.decoding import (
    DecodingWarning,
    SourceTooLongError,
    attention_weights,
    encode_sources,
    greedy_decode,
    output_budget,
    source_ids,
    translate,
    translate_detailed,
)
from transformer_jax.nn import ModelConfig

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


class StubTokenizer:
    """Space-separated words; unknown words -> <unk> (3); decode stops at <eos>."""

    def __init__(self, words):
        self.tokens = SPECIALS + list(words)
        self.ids = {t: i for i, t in enumerate(self.tokens)}

    @property
    def vocab_size(self):
        return len(self.tokens)

    def encode(self, text):
        return [self.ids.get(w, 3) for w in text.split(" ")]

    def decode(self, ids):
        out = []
        for i in ids:
            if i == 2:
                break
            if i > 1:
                out.append(self.tokens[i])
        return " ".join(out)


SRC = StubTokenizer("go i lost he's calm i'm home . !".split())
TGT = StubTokenizer("va j'ai perdu il est calme je suis chez moi . !".split())


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(
        src_vocab_size=SRC.vocab_size,
        tgt_vocab_size=TGT.vocab_size,
        num_encoder_layers=1,
        num_decoder_layers=1,
        model_dim=32,
        num_heads=4,
        ffn_dim=64,
        max_len=16,
    )
    return cfg, random_params(cfg, seed=2)


def test_unknown_words_map_to_unk_and_eos_is_appended():
    assert source_ids(SRC, "go zzz .") == [4, 3, 11, 2]


def test_translate_equals_decoding_each_sentence_alone(model):
    """Sorting, bucketing and batch padding must not change any translation."""
    cfg, params = model
    sentences = ["go .", "i lost .", "he's calm .", "i'm home .", "go go go home !"]
    got = translate(cfg, params, SRC, TGT, sentences, batch_size=2, max_decode_len=8)
    assert len(got) == len(sentences)
    for sentence, text in zip(sentences, got, strict=True):
        ids = source_ids(SRC, sentence)
        src = jnp.asarray([ids], jnp.int32)
        alone = greedy_decode(cfg, params, src, jnp.asarray([len(ids)]), max_decode_len=8)
        assert text == TGT.decode(np.asarray(alone)[0].tolist())
    assert any(got)  # a random model still says something for some sentence


def test_beam_translate_runs_and_beam_one_is_greedy(model):
    cfg, params = model
    sentences = ["go .", "i lost ."]
    greedy = translate(cfg, params, SRC, TGT, sentences, max_decode_len=8)
    assert translate(cfg, params, SRC, TGT, sentences, max_decode_len=8, beam_size=1) == greedy
    beams = translate(cfg, params, SRC, TGT, sentences, max_decode_len=8, beam_size=3)
    assert len(beams) == 2 and all(isinstance(t, str) for t in beams)


def test_empty_sentence_gets_a_message_not_a_crash(model):
    cfg, params = model
    with pytest.warns(DecodingWarning, match="#1 is empty"):
        out = translate(cfg, params, SRC, TGT, ["go .", "   ", "i lost ."], max_decode_len=8)
    assert out[1] == ""
    assert out[0] == translate(cfg, params, SRC, TGT, ["go ."], max_decode_len=8)[0]
    with pytest.warns(DecodingWarning):
        assert translate(cfg, params, SRC, TGT, [""], max_decode_len=8) == [""]


def test_long_source_is_translated_whole_with_a_warning(model):
    """Beyond the training limit (and beyond model.max_len = 16 of a sinusoidal model), the
    whole source is encoded: the translation equals decoding all 31 ids, not the first 16."""
    cfg, params = model
    long = " ".join(["go", "home"] * 15)  # 31 ids with <eos>
    ids = source_ids(SRC, long)
    assert len(ids) == 31 and ids[-1] == 2
    with pytest.warns(DecodingWarning, match="31 tokens with <eos>, more than the longest the "):
        out = translate_detailed(cfg, params, SRC, TGT, [long], max_decode_len=8, trained_len=16)
    assert out.sources.ids == [ids] and out.sources.long == {0: 31}  # encoded whole
    alone = greedy_decode(cfg, params, jnp.asarray([ids]), jnp.asarray([31]), max_decode_len=8)
    np.testing.assert_array_equal(out.tokens[0], np.asarray(alone)[0])


def test_learned_positions_give_a_clear_error_naming_the_limit(model):
    cfg, _ = model
    learned = cfg.replace(positional="learned")
    params = random_params(learned, seed=3)
    long = " ".join(["go"] * 20)  # 21 ids > 16 rows
    with pytest.raises(SourceTooLongError, match=r"#1 \(21 tokens\).*model.max_len=16"):
        translate(learned, params, SRC, TGT, ["go .", long], max_decode_len=8)
    assert translate(learned, params, SRC, TGT, ["go ."], max_decode_len=8)  # within: fine


def test_output_budget_follows_the_source_length(model):
    """a·S + b rounded up to 8, or max_decode_len; a long source gets a long budget."""
    assert output_budget(5, max_len_a=2.0, max_len_b=10) == 24  # 20 -> 24
    assert output_budget(40, max_len_a=1.5, max_len_b=10) == 72  # 70 -> 72
    assert output_budget(40, max_decode_len=9) == 9
    assert output_budget(40, max_len_a=2.0, max_len_b=10, position_limit=64) == 64
    cfg, params = model
    short, long = "go .", " ".join(["go", "home"] * 15)
    out = translate_detailed(
        cfg, params, SRC, TGT, [short, long], max_len_a=2.0, max_len_b=10, batch_size=1
    )
    # Each sorted batch of one: budgets 16 (2·3 + 10) and 72 (2·31 + 10 -> 72).
    assert [len(t) for t in out.tokens] == [16, 72]


def test_many_bad_inputs_give_one_summary_warning_each():
    sentences = ["", "go .", " ".join(["go"] * 20), "  ", " ".join(["i"] * 17)]
    with pytest.warns(DecodingWarning) as record:
        encoded = encode_sources(SRC, sentences, trained_len=16)
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert "2 sentences: #0, #3 are empty" in messages[0]
    assert "Sentence #2 has 21 tokens with <eos>, more than the longest" in messages[1]
    assert "trained on (16) and 1 more" in messages[1]
    assert encoded.long == {2: 21, 4: 18} and encoded.empty == [0, 3]
    assert [len(x) for x in encoded.ids] == [0, 3, 21, 0, 18]  # nothing cut


def test_attention_weights_are_trimmed_to_real_tokens(model):
    cfg, params = model
    src = source_ids(SRC, "i lost .")  # 4 ids
    tgt = TGT.encode("j'ai perdu .")  # decoder reads <bos> + 3
    maps = attention_weights(cfg, params, src, tgt)
    assert maps.encoder_self.shape == (1, 4, 4, 4)
    assert maps.decoder_self.shape == (1, 4, 4, 4)
    assert maps.cross.shape == (1, 4, 4, 4)
    for w in (maps.encoder_self, maps.decoder_self, maps.cross):
        np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)  # nothing on padding
    assert np.all(np.triu(maps.decoder_self[0, 0], k=1) == 0.0)  # causal
    assert maps.tgt_tokens[0] == "<bos>" and len(maps.src_tokens) == 4
