"""Subword regularization: sampled segmentations, resegmented batches, the pipeline switch.

The draws are checked against an exact reference (every segmentation of a short text
enumerated in float64) and against SentencePiece's own sampler, and are reproduced by fresh
processes, by a second tiny training run and by a run killed and resumed.
"""

import collections
import functools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece as spm

from tests.helpers import REPO, subprocess_env
from transformer_jax.data import batching, config, encoding, packing, pipeline
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.data.sampling import SubwordSampling
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer
from transformer_jax.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer_jax.data.word_tokenizer import WordTokenizer

pytest_plugins = ["tests.conftest_data"]

SYLLABLES = "ka to ri mu se la no pi ve du".split()


def _sentences(n=300, seed=0):
    """Sentences of 2-8 words of 1-3 syllables: many ways to cut each word into pieces."""
    rng = np.random.default_rng(seed)
    word = lambda: "".join(rng.choice(SYLLABLES, rng.integers(1, 4)))
    return [" ".join(word() for _ in range(rng.integers(2, 9))) + " ." for _ in range(n)]


@pytest.fixture(scope="module")
def tok():
    return SentencePieceTokenizer.train(_sentences(), vocab_size=60)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sampled_segmentations_are_seeded_and_spell_the_same_text(model_type):
    tok = SentencePieceTokenizer.train(_sentences(), vocab_size=60, model_type=model_type)
    texts = _sentences(200, seed=1)
    alpha = 0.1 if model_type == "unigram" else 0.3  # bpe: the dropout probability
    a = tok.encode_sampled(texts, alpha=alpha, nbest=-1, seed=5)
    b = tok.encode_sampled(texts, alpha=alpha, nbest=-1, seed=5)
    c = tok.encode_sampled(texts, alpha=alpha, nbest=-1, seed=6)
    assert a == b and a != c
    best = [tok.encode(t) for t in texts]
    assert sum(x != y for x, y in zip(a, best, strict=True)) > 20  # many draws differ
    for text, ids in zip(texts, a, strict=True):
        assert tok.decode(ids) == text


# --- the draws against references ----------------------------------------------------------


def _segmentations(tok, text):
    """{piece ids: summed piece score} of every segmentation of `text` into vocabulary pieces
    (brute force over SentencePiece's normalized text; the test texts have no unknowns)."""
    pieces = {tok.id_to_token(i): i for i in range(4, tok.vocab_size)}

    @functools.cache
    def rest(start):
        if start == len(normalized):
            return {(): 0.0}
        out = {}
        for end in range(start + 1, len(normalized) + 1):
            piece = pieces.get(normalized[start:end])
            if piece is not None:
                for tail, score in rest(end).items():
                    out[(piece, *tail)] = tok._sp.get_score(piece) + score
        return out

    normalized = tok._sp.normalize(text)
    return rest(0)


def _close(draws, expected, n_sigma=5.0):
    """The share of `draws` of each segmentation of probability >= 1 % in `expected`
    ({ids: p}), and of the rarer ones together, within n_sigma binomial deviations of it; no
    draw outside `expected`."""
    counts = collections.Counter(map(tuple, draws))
    assert set(counts) <= set(expected), set(counts) - set(expected)
    rare = [ids for ids, p in expected.items() if p < 0.01]
    shares = [(counts[ids], p) for ids, p in expected.items() if p >= 0.01]
    shares.append((sum(counts[ids] for ids in rare), sum(expected[ids] for ids in rare)))
    n = len(draws)
    for count, p in shares:
        assert abs(count / n - p) <= n_sigma * math.sqrt(p * (1 - p) / n) + 1e-9, (count, p)


@pytest.fixture(scope="module")
def rich():
    """A unigram model with many pieces of these syllables: ~100 ways to cut a short text."""
    return SentencePieceTokenizer.train(_sentences(1000), vocab_size=150)


@pytest.mark.parametrize("nbest", [-1, 4])
def test_unigram_draws_follow_sentencepieces_distribution(rich, nbest):
    """P(x) ∝ exp(alpha * score(x)) over all segmentations (nbest -1) or the 4 best; the
    same for our draws and for SentencePiece's own (its rule, so the reference is its rule)."""
    tok, text, alpha, n = rich, "kato rimu .", 0.2, 4000
    scores = _segmentations(tok, text)
    assert len(scores) > 50  # many ways to cut it
    kept = sorted(scores, key=scores.get, reverse=True)[: nbest if nbest > 0 else None]
    weight = {ids: math.exp(alpha * scores[ids]) for ids in kept}
    expected = {ids: w / sum(weight.values()) for ids, w in weight.items()}
    assert max(expected.values()) < 0.5  # not one segmentation nearly always
    _close(tok.encode_sampled([text] * n, alpha=alpha, nbest=nbest, seed=0), expected)
    spm.set_random_generator_seed(0)
    theirs = tok._sp.encode([text] * n, enable_sampling=True, alpha=alpha, nbest_size=nbest)
    _close(theirs, expected)


@pytest.mark.parametrize("nbest", [-1, 4])
def test_unigram_draws_with_a_large_alpha_are_the_best_segmentation_unknowns_merged(tok, nbest):
    texts = _sentences(200, seed=7) + ["", "ka xx to .", "zz", "ri µ"]  # x, z, µ: unknown
    best = [tok.encode(t) for t in texts]
    drawn = tok.encode_sampled(texts, alpha=30.0, nbest=nbest, seed=0)
    assert sum(x == y for x, y in zip(drawn, best, strict=True)) >= 195  # near-ties aside
    assert drawn[-4:] == best[-4:] and best[-2] == [tok.token_to_id("▁"), UNK_ID]
    assert tok.encode_sampled([], alpha=0.5, nbest=nbest, seed=0) == []


def test_a_trie_too_large_for_its_table_searches_its_deeper_nodes(rich, monkeypatch):
    """A vocabulary of many characters keeps only its shallow trie nodes in the table (the
    rest by search): the same draws."""
    from transformer_jax.data import subword_draws as module

    texts = _sentences(300, seed=10) + ["ka xx to ."]
    want = rich.encode_sampled(texts, alpha=0.2, nbest=-1, seed=3)
    small = SentencePieceTokenizer(rich._model_proto)
    monkeypatch.setattr(module, "_DENSE_ENTRIES", 40 * (len(rich._pieces.alphabet) + 1))
    assert small.encode_sampled(texts, alpha=0.2, nbest=-1, seed=3) == want
    assert small._pieces.dense_nodes == 40 and len(small._pieces.edge_keys) > 100


@pytest.fixture(scope="module")
def bpe():
    return SentencePieceTokenizer.train(_sentences(), vocab_size=60, model_type="bpe")


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_bpe_without_randomness_is_sentencepieces_merging(bpe, alpha):
    """alpha 0 drops no merge (the best segmentation), 1 drops all (the characters)."""
    texts = _sentences(200, seed=8) + ["ka xx to .", ""]
    drawn = bpe.encode_sampled(texts, alpha=alpha, nbest=-1, seed=0)
    assert drawn == bpe._sp.encode(texts, enable_sampling=True, alpha=alpha, nbest_size=-1)
    assert (drawn == [bpe.encode(t) for t in texts]) == (alpha == 0.0)


def test_bpe_dropout_draws_as_sentencepiece_does(bpe):
    """4,000 draws of one text, ours against SentencePiece's: each segmentation's share."""
    text, alpha, n = "katori mupi .", 0.2, 4000
    spm.set_random_generator_seed(0)
    theirs = bpe._sp.encode([text] * n, enable_sampling=True, alpha=alpha, nbest_size=-1)
    theirs = collections.Counter(map(tuple, theirs))
    ours = collections.Counter(
        map(tuple, bpe.encode_sampled([text] * n, alpha=alpha, nbest=-1, seed=1))
    )
    assert len(theirs) > 10
    for ids in theirs.keys() | ours.keys():
        p, q = theirs[ids] / n, ours[ids] / n
        assert abs(p - q) <= 5 * math.sqrt(2 * max(p, q, 1 / n) / n), ids


# Run by `python -c` in a fresh interpreter: the draws of a saved tokenizer, as JSON.
_DRAW = """
import json, sys
from transformer_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer
tok = SentencePieceTokenizer.load(sys.argv[1])
texts, settings = json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(json.dumps([tok.encode_sampled(texts, alpha=a, nbest=n, seed=7) for a, n in settings]))
"""


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_the_same_seed_draws_the_same_ids_in_every_process(tmp_path, model_type):
    """One seed's draws in two fresh processes and here (SentencePiece's own sampler salts
    its generator per process: ~half of these texts drawn alike)."""
    tok = SentencePieceTokenizer.train(
        _sentences(1000), vocab_size=150 if model_type == "unigram" else 60, model_type=model_type
    )
    tok.save(tmp_path)
    texts = _sentences(300, seed=9)
    settings = [(0.2, -1), (0.2, 8)] if model_type == "unigram" else [(0.2, -1)]
    args = [sys.executable, "-c", _DRAW, str(tmp_path), json.dumps(texts), json.dumps(settings)]
    runs = []
    for _ in range(2):
        result = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(json.loads(result.stdout))
    here = [tok.encode_sampled(texts, alpha=a, nbest=n, seed=7) for a, n in settings]
    assert runs[0] == runs[1] == here
    best = [tok.encode(t) for t in texts]
    assert all(sum(x != y for x, y in zip(d, best, strict=True)) > 100 for d in here)


def _encoded_and_texts(tok, n=120, max_len=24):
    pairs = list(zip(_sentences(n, seed=2), _sentences(n, seed=3), strict=True))
    tokenized = encoding.tokenize_pairs(pairs, tok, tok)
    encoded = encoding.pad_pairs(tokenized, max_len, max_len)
    return pairs, tokenized, encoded


def test_resegment_keeps_the_text_and_falls_back_to_the_best_segmentation_when_too_long(tok):
    pairs, tokenized, encoded = _encoded_and_texts(tok)
    sampling = SubwordSampling.for_pairs(pairs, tokenized, tok, tok, alpha=0.1)
    rows = np.arange(len(encoded))
    drawn = sampling.resegment(encoded, rows, 24, 24, key=(0, 0))
    assert drawn.src.shape == (len(rows), 24) and drawn.tgt.shape == (len(rows), 24)
    for r in rows:
        src_text, tgt_text = pairs[encoded.index[r]]
        for ids, n, text in (
            (drawn.src[r], drawn.src_len[r], src_text),
            (drawn.tgt[r], drawn.tgt_len[r], tgt_text),
        ):
            assert ids[n - 1] == EOS_ID and (ids[n:] == PAD_ID).all()
            assert tok.decode(ids) == text
    assert not np.array_equal(drawn.src, encoded.src[:, :24])  # some rows were resampled
    assert sampling.sides_total == 2 * len(rows) and sampling.sides_sampled > len(rows)
    # A draw longer than its width keeps the stored (best) ids; a short one is used.
    long_draws = SubwordSampling.for_pairs(pairs, tokenized, _Drawn(30), _Drawn(3), alpha=0.1)
    kept = long_draws.resegment(encoded, rows, 24, 24, key=(0, 1))
    np.testing.assert_array_equal(kept.src, encoded.src[:, :24])
    np.testing.assert_array_equal(kept.src_len, encoded.src_len)
    np.testing.assert_array_equal(kept.tgt[:, :4], np.tile([7, 7, 7, EOS_ID], (len(rows), 1)))
    assert (kept.tgt[:, 4:] == PAD_ID).all() and (kept.tgt_len == 4).all()
    assert long_draws.sides_sampled == len(rows) and long_draws.sides_total == 2 * len(rows)


class _Drawn:
    """A stand-in tokenizer whose every draw is `length` pieces of id 7."""

    kind = "stub"

    def __init__(self, length):
        self.length = length

    def encode_sampled(self, texts, **kwargs):
        return [[7] * self.length for _ in texts]


def test_resegment_joined_rows_spell_both_sentences(tok):
    pairs = list(zip(_sentences(40, seed=4), _sentences(40, seed=5), strict=True))
    from transformer_jax.data.augment import concatenated_pairs

    tokenized = concatenated_pairs(
        encoding.tokenize_pairs(pairs, tok, tok), 0.5, max_src_len=64, max_tgt_len=64, seed=0
    )
    encoded = encoding.pad_pairs(tokenized, 64, 64)
    sampling = SubwordSampling.for_pairs(pairs, tokenized, tok, tok, alpha=0.1)
    joined = np.arange(40, len(encoded))
    drawn = sampling.resegment(encoded, joined, 64, 64, key=(1, 2))
    for r, row in enumerate(joined):
        a, b = tokenized.origin[row]
        assert b >= 0
        assert tok.decode(drawn.src[r]) == f"{pairs[a][0]} {pairs[b][0]}"
        assert tok.decode(drawn.tgt[r]) == f"{pairs[a][1]} {pairs[b][1]}"
        # The best segmentation of the joined text is the two best ones end to end.
        assert tok.encode(f"{pairs[a][0]} {pairs[b][0]}") + [EOS_ID] == tokenized.src[row]


def _iterator(encoded, sampling, **kwargs):
    defaults = dict(global_batch=8, seed=3, bucket_boundaries=(8, 12, 24), sampling=sampling)
    return batching.TrainIterator(encoded, **{**defaults, **kwargs})


def _texts(tok, batch):
    return [
        (tok.decode(s), tok.decode(t)) for s, t in zip(batch["src"], batch["tgt_out"], strict=True)
    ]


def test_sampled_batches_follow_the_same_plan_with_new_segmentations(tok):
    pairs, tokenized, encoded = _encoded_and_texts(tok)
    sampling = SubwordSampling.for_pairs(pairs, tokenized, tok, tok, alpha=0.1)
    plain, sampled = _iterator(encoded, None), _iterator(encoded, sampling)
    assert sampled.batches_per_epoch == plain.batches_per_epoch
    differ = 0
    for _ in range(3 * plain.batches_per_epoch):
        a, b = next(plain), next(sampled)
        assert a["src"].shape == b["src"].shape and a["tgt_out"].shape == b["tgt_out"].shape
        assert _texts(tok, a) == _texts(tok, b)  # the same pairs, in the same rows
        np.testing.assert_array_equal(b["tgt_in"][:, 1:], b["tgt_out"][:, :-1])
        np.testing.assert_array_equal(b["tgt_weight"], b["tgt_out"] != PAD_ID)
        differ += not np.array_equal(a["src"], b["src"])
    assert differ > plain.batches_per_epoch
    # Epoch 3 read on is the epoch recomputed from its number alone.
    again = [next(sampled) for _ in range(sampled.batches_per_epoch)]
    for x, y in zip(again, _iterator(encoded, sampling).epoch_batches(3), strict=True):
        np.testing.assert_array_equal(x["src"], y["src"])
    # An epoch later, the same pair is read with other draws.

    def by_pair(epoch):
        out = {}
        for batch in sampled.epoch_batches(epoch):
            for texts, ids, n in zip(
                _texts(tok, batch), batch["src"], batch["src_len"], strict=True
            ):
                out[texts] = tuple(ids[:n])
        return out

    first, second = by_pair(0), by_pair(1)
    common = first.keys() & second.keys()
    assert len(common) > 30 and sum(first[k] != second[k] for k in common) > 2


def test_sampled_batches_resume_exactly_and_split_over_processes(tok):
    pairs, tokenized, encoded = _encoded_and_texts(tok)

    def make(**kwargs):
        sampling = SubwordSampling.for_pairs(pairs, tokenized, tok, tok, alpha=0.1)
        return _iterator(encoded, sampling, **kwargs)

    reference = make(row_multiple=2)
    want = [next(reference) for _ in range(30)]
    it = make(row_multiple=2)
    for _ in range(17):
        next(it)
    resumed = make(row_multiple=2)
    resumed.set_state(json.loads(json.dumps(it.get_state())))
    procs = [make(process_index=p, process_count=2) for p in range(2)]
    for _ in range(17):
        for p in procs:
            next(p)
    for whole in want[17:]:
        got = next(resumed)
        parts = [next(p) for p in procs]
        for key in encoding.BATCH_KEYS:
            np.testing.assert_array_equal(got[key], whole[key])
            np.testing.assert_array_equal(np.concatenate([q[key] for q in parts]), whole[key])


def _packed_texts(tok, batch):
    """(source, target) text of every pair of a packed batch, row by row."""
    out = []
    for r in range(len(batch["src"])):
        for k in range(1, batch["src_segment"][r].max() + 1):
            src = batch["src"][r][batch["src_segment"][r] == k]
            tgt = batch["tgt_out"][r][batch["tgt_segment"][r] == k]
            out.append((tok.decode(src), tok.decode(tgt)))
    return out


def test_sampled_packed_rows_keep_their_pairs_and_fit(tok):
    pairs, tokenized, encoded = _encoded_and_texts(tok)
    sampling = SubwordSampling.for_pairs(pairs, tokenized, tok, tok, alpha=0.1)
    sampled = batching.TrainIterator(encoded, sampling=sampling, global_batch=4, packing=True)
    differ = 0
    for i in range(sampled.batches_per_epoch):
        b = next(sampled)
        # The plan's pairs in the plan's rows, each with its best segmentation.
        plan_pairs, row_of = sampled.epoch_plan[i]
        a = packing.packed_batch(
            encoded, plan_pairs, row_of, first_row=0, num_rows=4, src_width=24, tgt_width=24
        )
        assert _packed_texts(tok, a) == _packed_texts(tok, b)  # the same pairs, same rows
        assert b["src"].shape == (4, 24)  # every row still fits its width
        np.testing.assert_array_equal(b["tgt_weight"], b["tgt_segment"] > 0)
        first = (b["tgt_position"] == 0) & (b["tgt_segment"] > 0)
        np.testing.assert_array_equal(b["tgt_in"][first], BOS_ID)  # each pair's own <bos>
        differ += int(np.any(a["src"] != b["src"], axis=1).sum())  # rows with a new draw
    # alpha 0.1 on this small vocabulary draws the best segmentation most of the time (~1 in
    # 4 rows differs; none without sampling).
    assert differ >= 3
    # The rows were planned with room for longer draws: most reads keep their draw.
    assert sampling.sides_sampled > 0.9 * sampling.sides_total
    # Reading an epoch for a report leaves the run's counters alone.
    counts = (sampling.sides_sampled, sampling.sides_total)
    assert len(list(sampled.epoch_batches(1))) > 0
    assert (sampling.sides_sampled, sampling.sides_total) == counts


def test_sampling_needs_sentencepiece():
    tok = WordTokenizer.train(["a b"], min_freq=1)
    with pytest.raises(ValueError, match="needs SentencePiece tokenizers, got 'word'"):
        SubwordSampling(["a"], ["b"], tok, tok, alpha=0.1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(sp_sampling_alpha=0.1), "data.tokenizer='word'"),
        (dict(tokenizer="sentencepiece", sp_sampling_alpha=1.5), r"must be in \(0, 1\]"),
        (dict(tokenizer="sentencepiece", sp_sampling_alpha=0.1, sp_sampling_nbest=1), "n >= 2"),
    ],
)
def test_bad_sampling_config_names_the_key(overrides, message):
    cfg = config.data_config()
    cfg.update(overrides)
    if "tokenizer" not in overrides:
        cfg.tokenizer = "word"
    with pytest.raises(ValueError, match=message):
        config.check_data_values(cfg)


def test_pipeline_samples_training_batches_only(small_zip, make_cfg, caplog):
    # Widths with room to spare, so that most draws fit their batch.
    kwargs = dict(tokenizer="sentencepiece", vocab_size=40, max_src_len=40, max_tgt_len=40)
    base = pipeline.create_input_pipeline(make_cfg(small_zip, **kwargs))
    with caplog.at_level("INFO"):
        pipe = pipeline.create_input_pipeline(make_cfg(small_zip, sp_sampling_alpha=0.1, **kwargs))
    assert "subword sampling (alpha 0.1, nbest -1)" in caplog.text
    tok = pipe.src_tokenizer
    a = list(base.train_iter.epoch_batches(0))
    b = list(pipe.train_iter.epoch_batches(0))
    assert [_texts(tok, x) for x in a] == [_texts(tok, x) for x in b]
    assert any(not np.array_equal(x["src"], y["src"]) for x, y in zip(a, b, strict=True))
    # Reading past the end of an epoch logs how many reads were drawn.
    with caplog.at_level("INFO"):
        for _ in range(pipe.train_iter.batches_per_epoch + 1):
            next(pipe.train_iter)
    assert "after epoch 0, " in caplog.text and "sentence reads used a drawn" in caplog.text
    for split in ("eval", "test"):
        for x, y in zip(base.eval_batches(split), pipe.eval_batches(split), strict=True):
            np.testing.assert_array_equal(x["src"], y["src"])
            np.testing.assert_array_equal(x["tgt_out"], y["tgt_out"])


# --- whole runs: the same draws in a second run and after a resume ----------------------------

# Run in a fresh interpreter: the runlocal model with a SentencePiece vocabulary and sampling,
# 6 steps (checkpoints 3 and 6); argv: workdir, the step after which the run dies (0: none).
_TRAIN = """
import sys
from absl import logging
from configs import fra_eng
from transformer_jax.training import train_and_evaluate

logging.set_verbosity(logging.INFO)
c = fra_eng.get_config("runlocal")
c.data.train_split = "train[:500]"
c.data.tokenizer, c.data.vocab_size, c.data.sp_sampling_alpha = "sentencepiece", 200, 0.5
c.data.bucketing = False
c.data.num_eval_examples = 16
c.num_train_steps = 6
c.log_every_steps = c.eval_every_steps = 6
c.checkpoint_every_steps = 3
c.eval.num_bleu_examples = 0


def after_step(end):
    if end.step == int(sys.argv[2]):
        sys.exit(3)  # between two steps: nothing logged or saved after the checkpoint before
    return False


train_and_evaluate(c, sys.argv[1], after_step=after_step)
"""
needs_corpus = pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"no corpus at {SHARED_ZIP}")


def _train(workdir, stop_after=0, returncode=0):
    result = subprocess.run(
        [sys.executable, "-c", _TRAIN, str(workdir), str(stop_after)],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == returncode, result.stderr[-4000:]
    return result.stderr  # absl logs


def _params(workdir):
    from tests.helpers import flat_params

    return flat_params(workdir)


@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sampled")
    log = _train(workdir)
    assert "subword sampling (alpha 0.5, nbest -1)" in log
    return workdir


@pytest.mark.slow
@needs_corpus
def test_two_sampled_runs_end_with_the_same_parameters(sampled_run, tmp_path):
    _train(tmp_path)
    np.testing.assert_array_equal(_params(tmp_path), _params(sampled_run))


@pytest.mark.slow
@needs_corpus
def test_a_sampled_run_stopped_and_resumed_ends_as_the_uninterrupted_one(sampled_run, tmp_path):
    _train(tmp_path, stop_after=5, returncode=3)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == ["3"]
    assert "Resumed from step 3" in _train(tmp_path)  # steps 4-6 drawn again, in a new process
    np.testing.assert_array_equal(_params(tmp_path), _params(sampled_run))
