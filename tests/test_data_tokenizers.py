"""Word and SentencePiece tokenizers: the book's vocabulary, round trips, save/load, caching."""

import os

import pytest

from tests.book_reference import BookVocab
from transformer_jax.data import config as config_lib
from transformer_jax.data import tokenizers, vocab
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer
from transformer_jax.data.word_tokenizer import WordTokenizer

pytest_plugins = ["tests.conftest_data"]

TRAIN = [
    "go .",
    "go now .",
    "i lost .",
    "i won !",
    "go away !",
    "i am here .",
    "you are here ?",
    "i am fine , thanks .",
]


def test_word_vocab_matches_the_book():
    book = BookVocab([s.split(" ") for s in TRAIN], 2, ["<pad>", "<bos>", "<eos>"])
    ours = WordTokenizer.train(TRAIN, min_freq=2)
    # Same non-special tokens in the same order; specials are a permutation (see vocab.py).
    assert [ours.id_to_token(i) for i in range(4, ours.vocab_size)] == book.idx_to_token[4:]
    assert ours.vocab_size == len(book.idx_to_token)
    assert [ours.id_to_token(i) for i in range(4)] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    # 'go', 'i', '.', '!', 'am', 'here' occur >= 2 times; 'thanks' once -> <unk>.
    assert ours.encode("i am thanks .") == [
        ours.token_to_id("i"),
        ours.token_to_id("am"),
        vocab.UNK_ID,
        ours.token_to_id("."),
    ]


def test_word_round_trip_and_specials():
    tok = WordTokenizer.train(TRAIN, min_freq=1)
    text = "i am fine , thanks ."
    ids = tok.encode(text)
    assert vocab.EOS_ID not in ids and vocab.BOS_ID not in ids
    assert tok.decode(ids) == text
    assert tok.decode([vocab.BOS_ID, *ids, vocab.EOS_ID, ids[0], vocab.PAD_ID]) == text


def test_word_save_load_and_fingerprint(tmp_path):
    tok = WordTokenizer.train(TRAIN, min_freq=1)
    tok.save(tmp_path / "w")
    loaded = tokenizers.load_tokenizer(tmp_path / "w")
    assert isinstance(loaded, WordTokenizer)
    assert loaded.fingerprint == tok.fingerprint and loaded.vocab_size == tok.vocab_size
    assert loaded.encode("you are here ?") == tok.encode("you are here ?")
    other = WordTokenizer.train(TRAIN[:-1], min_freq=1)
    assert other.fingerprint != tok.fingerprint


def test_check_vocabulary_mismatch_says_what_and_what_to_do():
    tok = WordTokenizer.train(TRAIN, min_freq=1)
    tokenizers.check_vocabulary(tok, tok.fingerprint, tok.vocab_size)  # matches: no error
    with pytest.raises(tokenizers.VocabularyMismatchError) as info:
        tokenizers.check_vocabulary(tok, "abc", tok.vocab_size + 1, what="source")
    message = str(info.value)
    assert f"vocab_size {tok.vocab_size} != {tok.vocab_size + 1}" in message
    assert f"fingerprint {tok.fingerprint} != abc" in message
    assert "source word tokenizer" in message and "load_tokenizers" in message


def _sp_corpus():
    words = "le chat noir mange une souris grise dans la maison bleue avec plaisir".split()
    return [" ".join(words[(i * k) % len(words)] for k in range(1, 2 + i % 9)) for i in range(400)]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_round_trip_save_load(tmp_path, model_type):
    tok = SentencePieceTokenizer.train(_sp_corpus(), vocab_size=30, model_type=model_type)
    assert tok.vocab_size == 30
    assert [tok.id_to_token(i) for i in range(4)] == list(vocab.SPECIAL_TOKENS)
    text = "la souris grise mange le chat"
    ids = tok.encode(text)
    assert all(i >= vocab.NUM_SPECIAL for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode([vocab.BOS_ID, *ids, vocab.EOS_ID, *ids, vocab.PAD_ID]) == text
    tok.save(tmp_path / "sp")
    loaded = tokenizers.load_tokenizer(tmp_path / "sp")
    assert loaded.fingerprint == tok.fingerprint and loaded.encode(text) == ids


def test_sentencepiece_too_large_vocab_names_the_setting():
    with pytest.raises(ValueError, match=r"data.vocab_size=5000.*lower data.vocab_size"):
        SentencePieceTokenizer.train(_sp_corpus(), vocab_size=5000)


def _cfg(**overrides):
    cfg = config_lib.data_config()
    cfg.vocab_size = 30
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


def test_sentencepiece_is_cached_and_not_retrained(tmp_path, monkeypatch):
    pairs = list(zip(_sp_corpus(), reversed(_sp_corpus()), strict=True))
    src, tgt = tokenizers.build_tokenizers(_cfg(shared_vocab=False), pairs, tmp_path)
    assert src is not tgt
    cached = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))  # no locks
    assert len(cached) == 2 and cached[0].startswith("spm-unigram-30-en-")

    def no_training(*args, **kwargs):
        raise AssertionError("retrained although a cached model exists")

    monkeypatch.setattr(SentencePieceTokenizer, "train", no_training)
    src2, tgt2 = tokenizers.build_tokenizers(_cfg(shared_vocab=False), pairs, tmp_path)
    assert (src2.fingerprint, tgt2.fingerprint) == (src.fingerprint, tgt.fingerprint)
    # Different training text -> different cache key -> would train (and here: raise).
    with pytest.raises(AssertionError, match="retrained"):
        tokenizers.build_tokenizers(_cfg(shared_vocab=False), pairs[:-1], tmp_path)


def test_a_damaged_cached_model_is_trained_again_to_the_same_model(tmp_path, caplog):
    pairs = list(zip(_sp_corpus(), reversed(_sp_corpus()), strict=True))
    (first,) = set(tokenizers.build_tokenizers(_cfg(shared_vocab=True), pairs, tmp_path))
    (model,) = tmp_path.glob("spm-*/spm.model")
    model.write_bytes(b"not a model")  # e.g. a disk fault; the cache key still matches
    (again,) = set(tokenizers.build_tokenizers(_cfg(shared_vocab=True), pairs, tmp_path))
    assert again.fingerprint == first.fingerprint
    assert "cannot be read" in caplog.text and "training it again" in caplog.text
    assert SentencePieceTokenizer.load(model.parent).fingerprint == first.fingerprint  # mended


def test_shared_vocab_returns_one_object(tmp_path):
    pairs = list(zip(_sp_corpus(), reversed(_sp_corpus()), strict=True))
    src, tgt = tokenizers.build_tokenizers(_cfg(shared_vocab=True), pairs, tmp_path)
    assert src is tgt
    word_src, word_tgt = tokenizers.build_tokenizers(
        _cfg(tokenizer="word", shared_vocab=True), [("a b", "c d"), ("a", "c")], tmp_path
    )
    assert word_src is word_tgt and word_src.id_to_token(4) in ("a", "c")


def test_separate_word_vocabularies_use_only_their_side(tmp_path):
    src, tgt = tokenizers.build_tokenizers(
        _cfg(tokenizer="word", shared_vocab=False, min_freq=1), [("go .", "va !")], tmp_path
    )
    assert src.encode("go .") != [vocab.UNK_ID] * 2 and src.encode("va") == [vocab.UNK_ID]
    assert tgt.encode("go") == [vocab.UNK_ID]


def test_save_load_pair(tmp_path):
    src, tgt = tokenizers.build_tokenizers(
        _cfg(tokenizer="word", shared_vocab=False, min_freq=1), [("go .", "va !")], tmp_path
    )
    tokenizers.save_tokenizers(src, tgt, tmp_path / "ckpt")
    src2, tgt2 = tokenizers.load_tokenizers(tmp_path / "ckpt")
    assert (src2.fingerprint, tgt2.fingerprint) == (src.fingerprint, tgt.fingerprint)


@pytest.mark.parametrize("kind", ["word", "sentencepiece"])
def test_unknown_words_are_the_words_read_as_unk(kind):
    from transformer_jax.inference.source_ids import unknown_words

    if kind == "word":
        tok = WordTokenizer.train(TRAIN, min_freq=1)
        text, unseen = "i am lost , cat ! cat", ["cat"]  # the others are in TRAIN
    else:
        tok = SentencePieceTokenizer.train(_sp_corpus(), vocab_size=30)
        text, unseen = "le chat ❤ mange 😀 ❤", ["❤", "😀"]  # characters never seen
    assert unknown_words(tok, text) == unseen  # each once, in order
    assert unknown_words(tok, text, tok.encode(text)) == unseen  # ids already encoded
    assert vocab.UNK_ID in tok.encode(text)
    known = " ".join(w for w in text.split() if w not in unseen)
    assert unknown_words(tok, known) == [] and vocab.UNK_ID not in tok.encode(known)


def test_the_model_is_the_same_whatever_the_machines_core_count(real_cfg, monkeypatch):
    """SentencePiece's trainer splits its work over its threads and the model depends on the
    split (on these 10,000 sentences 1, 2 and 4 threads gave three models): the thread count
    is fixed, never the machine's cores, so every machine trains the same vocabulary."""
    from transformer_jax.data import datasets

    pairs = datasets.load_split_pairs(real_cfg, "train")
    sentences = [s for pair in pairs[:: len(pairs) // 5000] for s in pair]
    fingerprints = set()
    for cores in (1, 4):
        monkeypatch.setattr(os, "cpu_count", lambda cores=cores: cores)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, cores=cores: set(range(cores)))
        tokenizer = SentencePieceTokenizer.train(sentences, vocab_size=200)
        fingerprints.add(tokenizer.fingerprint)
    assert len(fingerprints) == 1
