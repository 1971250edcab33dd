"""`inference.Translator` (built from parameters) and `attention_weights` on text, with a stub
word tokenizer."""

import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.data.encoding import encode_text, tokenize_pairs
from transformer_jax.data.vocab import PAD_ID
from transformer_jax.decoding import SourceTooLongError, greedy_decode, output_budget
from transformer_jax.evaluation import attention_weights
from transformer_jax.inference import DecodingWarning, Translator, encode_sources
from transformer_jax.testing import random_params, tiny_config

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
    cfg = tiny_config(
        SRC.vocab_size, TGT.vocab_size, num_encoder_layers=1, num_decoder_layers=1, max_len=16
    )
    return cfg, random_params(cfg, seed=2)


def translate(cfg, params, src, tgt, sentences, **settings):
    return Translator.from_params(cfg, params, src, tgt).translate(sentences, **settings)


def translate_detailed(cfg, params, src, tgt, sentences, **settings):
    return Translator.from_params(cfg, params, src, tgt).translate_detailed(sentences, **settings)


def source_ids(tokenizer, sentence):
    return encode_sources(tokenizer, [sentence], warn=False).ids[0]


def test_unknown_words_map_to_unk_and_eos_is_appended():
    assert source_ids(SRC, "go zzz .") == [4, 3, 11, 2]


def test_translation_sources_are_the_training_rows():
    """One encoding for training and translation: data's `encode_text` makes both."""
    sentences = ["go .", "i lost zzz !", "he's calm ."]
    training = tokenize_pairs([(s, "va .") for s in sentences], SRC, TGT).src
    assert [source_ids(SRC, s) for s in sentences] == training
    assert training[1] == encode_text(SRC, "i lost zzz !") == [5, 6, 3, 12, 2]


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
    """a·W + b rounded up to 8 (W a source's length), or max_decode_len; a long source gets a
    long budget (each row its own limit in one compiled program)."""
    assert output_budget(5, max_len_a=2.0, max_len_b=10) == 24  # 20 -> 24
    assert output_budget(40, max_len_a=1.5, max_len_b=10) == 72  # 70 -> 72
    assert output_budget(40, max_len_a=2.0, max_len_b=10, max_decode_len=9) == 9
    assert output_budget(40, max_len_a=2.0, max_len_b=10, position_limit=64) == 64
    cfg, params = model
    short, short4, long = "go .", "go home .", " ".join(["go", "home"] * 15)
    out = translate_detailed(
        cfg, params, SRC, TGT, [short, long, short4], max_len_a=2.0, max_len_b=10, batch_size=1
    )
    # Each sorted batch of one: 3 and 4 tokens round to 8, budget 2·8 + 10 -> 32; 31 tokens
    # round to 32, budget 2·32 + 10 -> 80. The programs are of widths 16 and 64, so their
    # output rooms are 2·16 + 10 -> 48 and 2·64 + 10 -> 144; the budget stops the search.
    assert [len(t) for t in out.tokens] == [48, 144, 48]
    budgets = [32, 80, 32]
    for tokens, budget in zip(out.tokens, budgets, strict=True):
        assert np.all(tokens[budget:] == PAD_ID)
    # The random model rarely says <eos>: some row runs to its budget, not to its room.
    assert [int(np.sum(t != PAD_ID)) for t in out.tokens] == budgets


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


class DroppingTokenizer(StubTokenizer):
    """As SentencePiece: zero-width characters are normalised away, so "\u200b" -> []."""

    def encode(self, text):
        text = text.replace("\u200b", "").replace("\ufeff", "")
        return super().encode(text) if text.strip() else []


def test_a_source_the_tokenizer_reads_as_nothing_is_empty(model):
    """A line of zero-width characters encodes to a bare <eos>, from which the model makes up
    a sentence ("." or "S'il vous plaît."); it is an empty input: an empty translation."""
    cfg, params = model
    src = DroppingTokenizer(SRC.tokens[4:])
    with pytest.warns(DecodingWarning, match="#1, #2 are empty"):
        encoded = encode_sources(src, ["go .", "\u200b", " \ufeff\u200b "])
    assert encoded.empty == [1, 2] and encoded.ids[1:] == [[], []]
    out = translate(cfg, params, src, TGT, ["\u200b", "go ."], warn=False)
    assert out[0] == "" and out[1] == translate(cfg, params, src, TGT, ["go ."])[0]


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


def test_translator_settings_come_from_the_config_and_calls_override_them(model):
    """A run config's eval keys are the defaults; a call's keywords win; a typo is named."""
    from configs import fra_eng

    cfg, params = model
    config = fra_eng.get_config("runlocal")
    config.eval.beam_size, config.eval.max_decode_len = 3, 5
    translator = Translator.from_params(cfg, params, SRC, TGT, config=config)
    assert translator.settings["beam_size"] == 3
    assert translator.settings["trained_len"] == config.data.max_src_len
    assert translator.settings["segment_len"] == 1  # eval.segment_len: sentence by sentence
    config.eval.segment_len = 0
    assert Translator.from_params(cfg, params, SRC, TGT, config=config).settings["segment_len"] == 0
    out = translator.translate_detailed(["go ."])
    assert len(out.tokens[0]) == 5  # the config's max_decode_len
    greedy = Translator.from_params(cfg, params, SRC, TGT, max_decode_len=5)
    assert translator.translate(["go ."], beam_size=1) == greedy.translate(["go ."])
    with pytest.raises(TypeError, match="beam_sise.*valid ones are"):
        translator.translate(["go ."], beam_sise=2)
    with pytest.raises(ValueError, match=r"segment_len must be an integer >= 0 .*got -3"):
        translator.translate(["go ."], segment_len=-3)


def test_detailed_translation_ids_names_and_counts(model):
    cfg, params = model
    translator = Translator.from_params(cfg, params, SRC, TGT, max_decode_len=8)
    out = translator.translate_detailed(["go .", "", "i lost ."], warn=False)
    assert out.sources.empty == [1] and out.tokens[1].shape == (0,) and out.target_ids[1] == []
    for i in (0, 2):
        row = out.tokens[i].tolist()
        end = row.index(2) if 2 in row else len(row)
        assert out.target_ids[i] == [t for t in row[:end] if t != 0]
        assert out.texts[i] == TGT.decode(out.target_ids[i])
    ends = sum(int(2 in out.tokens[i].tolist()) for i in (0, 2))
    assert out.generated_tokens == len(out.target_ids[0]) + len(out.target_ids[2]) + ends
    assert translator.token_names([4, 2]) == ["go", ""]  # decode of <eos> is empty


def test_translator_attention_maps_are_those_of_its_translation(model):
    cfg, params = model
    translator = Translator.from_params(cfg, params, SRC, TGT, max_decode_len=6)
    out = translator.translate_detailed(["i lost ."])
    maps = translator.attention_maps("i lost .")
    want = attention_weights(cfg, params, source_ids(SRC, "i lost ."), out.target_ids[0])
    np.testing.assert_allclose(maps.cross, want.cross, rtol=1e-6)
    assert maps.tgt_tokens == ["<bos>", *(TGT.tokens[i] for i in out.target_ids[0])]
    given = translator.attention_maps("i lost .", target_ids=[4, 5])
    assert given.cross.shape[2] == 3  # <bos> + the two given ids
    with pytest.raises(ValueError, match="non-empty"):
        translator.attention_maps("  ")


PARAGRAPH = "go home . i lost ! he's calm . i'm home . go . i lost home ."  # 19 ids, 6 sentences
SENTENCES = ["go home .", "i lost !", "he's calm .", "i'm home .", "go .", "i lost home ."]


def test_a_paragraph_is_translated_sentence_by_sentence_by_default(model):
    """Each sentence decoded alone, the translations joined; other inputs untouched."""
    cfg, params = model
    translator = Translator.from_params(cfg, params, SRC, TGT, max_decode_len=8)
    assert translator.settings["segment_len"] == 1
    out = translator.translate_detailed(["go .", PARAGRAPH])
    assert out.sources.parts == {1: [source_ids(SRC, p) for p in SENTENCES]}
    assert out.sources.ids[1] == source_ids(SRC, PARAGRAPH) and out.sources.long == {}
    alone = translator.translate_detailed(SENTENCES, warn=False)
    assert out.texts[1] == " ".join(t for t in alone.texts if t)
    assert out.target_ids[1] == [t for ids in alone.target_ids for t in ids]
    assert out.tokens[1].tolist() == [*out.target_ids[1], 2]
    go = translator.translate_detailed(["go ."])
    assert out.texts[0] == go.texts[0] and out.sources.rows(0) == [source_ids(SRC, "go .")]
    assert out.generated_tokens == go.generated_tokens + alone.generated_tokens


def test_a_larger_segment_len_packs_whole_sentences_up_to_it(model):
    cfg, params = model
    translator = Translator.from_params(cfg, params, SRC, TGT, max_decode_len=8)
    out = translator.translate_detailed([PARAGRAPH], segment_len=8)
    parts = ["go home . i lost !", "he's calm . i'm home .", "go . i lost home ."]
    assert out.sources.parts == {0: [source_ids(SRC, p) for p in parts]}
    assert [len(r) for r in out.sources.parts[0]] == [7, 7, 7]  # each <= 8
    alone = translator.translate(parts, segment_len=0)  # each part whole
    assert out.texts[0] == " ".join(t for t in alone if t)


def test_segment_len_zero_or_fitting_inputs_are_translated_whole(model):
    cfg, params = model
    translator = Translator.from_params(cfg, params, SRC, TGT, max_decode_len=8, trained_len=8)
    with pytest.warns(DecodingWarning, match="more than the longest the model was trained on"):
        whole = translator.translate_detailed([PARAGRAPH], segment_len=0)
    assert whole.sources.parts == {} and whole.sources.long == {0: 19}
    ids = source_ids(SRC, PARAGRAPH)
    alone = greedy_decode(cfg, params, jnp.asarray([ids]), jnp.asarray([19]), max_decode_len=8)
    np.testing.assert_array_equal(whole.tokens[0], np.asarray(alone)[0])
    # A segment_len the input fits: whole again.
    fits = translator.translate_detailed([PARAGRAPH], segment_len=19, warn=False)
    assert fits.sources.parts == {} and fits.texts == whole.texts


def test_parts_fit_a_learned_position_table_that_the_whole_input_does_not(model):
    """The learned table's limit applies to what is encoded: a paragraph beyond it whose
    sentences fit is translated in parts; a single sentence beyond it is still an error."""
    cfg, _ = model
    learned = cfg.replace(positional="learned")  # 16 rows
    params = random_params(learned, seed=3)
    paragraph = f"{PARAGRAPH} {PARAGRAPH}"  # 37 ids
    translator = Translator.from_params(learned, params, SRC, TGT, max_decode_len=8)
    with pytest.raises(SourceTooLongError, match=r"#0 \(37 tokens\)"):
        translator.translate([paragraph], segment_len=0)
    out = translator.translate_detailed([paragraph], segment_len=16, warn=False)
    assert len(out.sources.parts[0]) == 3 and max(map(len, out.sources.parts[0])) <= 16
    assert len(translator.translate_detailed([paragraph]).sources.parts[0]) == 12
    with pytest.raises(SourceTooLongError, match=r"#0 \(21 tokens\)"):
        translator.translate([" ".join(["go"] * 20)])


def test_attention_maps_of_a_paragraph_are_of_the_whole_input(model):
    cfg, params = model
    translator = Translator.from_params(cfg, params, SRC, TGT, max_decode_len=8)
    maps = translator.attention_maps(PARAGRAPH)
    assert len(maps.src_tokens) == 19  # the whole input, not a part
    whole = translator.translate_detailed([PARAGRAPH], segment_len=0, warn=False)
    assert maps.tgt_tokens == ["<bos>", *(TGT.tokens[i] for i in whole.target_ids[0])]
