"""create_input_pipeline end to end: small generated corpus, and book parity on the real one."""

import zipfile

import numpy as np

from tests.book_reference import BookVocab, book_preprocess_nmt
from transformer_jax.data import datasets, pipeline, tokenizers
from transformer_jax.data.vocab import PAD_ID

pytest_plugins = ["tests.conftest_data"]


def test_pipeline_on_small_corpus(tmp_path, small_zip, make_cfg):
    cfg = make_cfg(small_zip, bucketing=True, bucket_step=4)
    pipe = pipeline.create_input_pipeline(cfg, row_multiple=2)
    sizes = pipe.split_sizes
    assert sizes["full"] == 180
    assert sizes["train"] + sizes["validation"] + sizes["test"] == 180
    assert sizes["selected_train"] == sizes["train"]
    batch = next(pipe.train_iter)
    assert set(batch) == {"src", "src_len", "tgt_in", "tgt_out", "tgt_weight"}
    # One process: all 8 rows of the global batch, no device axis (DataParallel splits it).
    assert batch["src"].shape[0] == 8 and batch["src"].shape[1] in (4, 8, 10)
    # Eval batches reproduce the eval pairs, in order (min_freq 1; eval words may be <unk>).
    decoded = []
    for eval_batch in pipe.eval_batches("eval"):
        assert eval_batch["tgt_out"].shape == (8, 10) and eval_batch["index"].shape == (8,)
        for row, index in zip(eval_batch["tgt_out"], eval_batch["index"], strict=True):
            if index >= 0:
                decoded.append((index, pipe.tgt_tokenizer.decode(row)))
    assert [i for i, _ in decoded] == list(range(len(pipe.eval_pairs)))
    for (_, text), (_, reference) in zip(decoded, pipe.eval_pairs, strict=True):
        words = reference.split(" ")[:9]  # 9 tokens + <eos> = max_tgt_len 10
        assert text.split(" ") == [
            w if pipe.tgt_tokenizer.token_to_id(w) != 3 else "<unk>" for w in words
        ]


def test_sentencepiece_pipeline_caches_beside_the_data(tmp_path, small_zip, make_cfg):
    cfg = make_cfg(small_zip, tokenizer="sentencepiece", vocab_size=40, shared_vocab=True)
    pipe = pipeline.create_input_pipeline(cfg)
    assert pipe.src_tokenizer is pipe.tgt_tokenizer
    cached = [p for p in (tmp_path / "tfds" / "tokenizers").iterdir() if p.is_dir()]  # no locks
    assert len(cached) == 1 and cached[0].name.startswith("spm-unigram-40-shared-")
    again = pipeline.create_input_pipeline(cfg)
    tokenizers.check_vocabulary(again.src_tokenizer, pipe.src_tokenizer.fingerprint, 40)
    src, tgt = pipe.eval_pairs[0]
    assert pipe.src_tokenizer.decode(pipe.src_tokenizer.encode(src)) == src


def _book_build_array(lines, vocab, num_steps):
    """d2l `build_array_nmt` (+ `truncate_pad`) with the book's vocabulary, as tokens."""
    rows = []
    for line in lines:
        ids = [vocab.token_to_idx.get(t, 0) for t in line] + [vocab.token_to_idx["<eos>"]]
        ids = ids[:num_steps] + [vocab.token_to_idx["<pad>"]] * (num_steps - len(ids))
        rows.append([vocab.idx_to_token[i] for i in ids])
    return rows


def test_book_parity_mode_on_real_corpus(real_cfg):
    cfg = real_cfg.copy_and_resolve_references()
    cfg.update(
        train_split="full[:601]",
        tokenizer="word",
        shared_vocab=False,
        min_freq=2,
        max_src_len=10,
        max_tgt_len=10,
        batch_size=64,
        bucketing=False,
    )
    pipe = pipeline.create_input_pipeline(cfg)
    # The book, transcribed: preprocess the raw text, tokenize_nmt(text, 600), Vocab, arrays.
    with zipfile.ZipFile(cfg.zip_path) as archive:
        raw = archive.read("fra-eng/fra.txt").decode("utf-8")

    text = book_preprocess_nmt("\n".join(raw.split("\n")[:700]))
    source, target = [], []
    for i, line in enumerate(text.split("\n")):
        if i > 600:
            break
        parts = line.split("\t")
        if len(parts) == 2:
            source.append(parts[0].split(" "))
            target.append(parts[1].split(" "))
    assert len(source) == 601 == pipe.split_sizes["selected_train"]
    reserved = ["<pad>", "<bos>", "<eos>"]
    for ours, lines in ((pipe.src_tokenizer, source), (pipe.tgt_tokenizer, target)):
        book = BookVocab(lines, 2, reserved)
        assert ours.vocab_size == len(book.idx_to_token)
        assert [ours.id_to_token(i) for i in range(4, ours.vocab_size)] == book.idx_to_token[4:]
    # One epoch of batches covers 9 x 64 of the 601 examples; compare them as tokens.
    it = pipe.train_iter
    order = np.random.default_rng([cfg.shuffle_seed, 0]).permutation(601)
    book_src = _book_build_array(source, BookVocab(source, 2, reserved), 10)
    book_tgt = _book_build_array(target, BookVocab(target, 2, reserved), 10)
    for b in range(it.batches_per_epoch):
        batch = next(it)
        for row, src_row, tgt_row, weights in zip(
            order[b * 64 : (b + 1) * 64],
            batch["src"],
            batch["tgt_out"],
            batch["tgt_weight"],
            strict=True,
        ):
            assert [pipe.src_tokenizer.id_to_token(i) for i in src_row] == book_src[row]
            assert [pipe.tgt_tokenizer.id_to_token(i) for i in tgt_row] == book_tgt[row]
            assert weights.sum() == sum(t != "<pad>" for t in book_tgt[row])
    assert (batch["src"] != PAD_ID).sum() == batch["src_len"].sum()


def test_whole_pairs_are_kept_and_longer_ones_skipped_and_counted(
    tmp_path, make_zip, synthetic_lines, make_cfg, caplog
):
    """Pairs longer than the book's 14-token cap but within the limit are batched whole;
    pairs beyond the limit are skipped (never cut) and counted in the sizes and the log."""
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    medium = [" ".join(words[(i + k) % 12] for k in range(19)) for i in range(12)]  # 19 words
    long = [" ".join(words[(i + k) % 12] for k in range(30)) for i in range(8)]  # 30 words
    lines = synthetic_lines() + [f"{e} {i}.\tfr {e} ." for i, e in enumerate(medium + long)]
    cfg = make_cfg(make_zip(tmp_path / "long.zip", lines), max_src_len=24, max_tgt_len=24)
    cfg.bucketing, cfg.bucket_boundaries = True, (12,)
    with caplog.at_level("INFO"):
        pipe = pipeline.create_input_pipeline(cfg)
    sizes = pipe.split_sizes
    # 30 words + number + "." + <eos> = 33 source tokens > 24: all 8 long pairs skipped.
    skipped = sizes["skipped_train"] + sizes["skipped_eval"] + sizes["skipped_test"]
    assert skipped == 8 and sizes["skipped_train"] > 0
    log = caplog.text
    assert f"skipped {sizes['skipped_train']} of {sizes['train']} training pairs" in log
    assert "train source tokens (with <eos>): p50" in log and "p99.9" in log
    # The medium pairs of the train split appear whole (22 tokens: 19 words, number, ".",
    # <eos>) in one epoch's batches, <eos> last; none is cut.
    train_pairs = datasets.load_split_pairs(cfg, cfg.train_split)
    train_medium = sum(len(source.split()) == 21 for source, _ in train_pairs)
    seen = []
    for batch in pipe.train_iter.epoch_batches(0):
        for src, n in zip(batch["src"], batch["src_len"], strict=True):
            assert src[n - 1] == 2  # every source ends in <eos>
            if n > 14:
                seen.append(int(n))
    assert set(seen) == {22} and len(seen) == train_medium > 0


def test_concat_fraction_adds_joined_pairs_to_training_only(tmp_path, small_zip, make_cfg, caplog):
    base = pipeline.create_input_pipeline(make_cfg(small_zip))
    cfg = make_cfg(small_zip)
    cfg.concat_fraction = 0.5
    with caplog.at_level("INFO"):
        pipe = pipeline.create_input_pipeline(cfg)
    real = base.split_sizes["selected_train"]
    added = len(pipe.train_iter._encoded) - len(base.train_iter._encoded)
    assert 0 < added <= round(0.5 * real)
    assert f"added {added} joined pairs to the {real} real training pairs" in caplog.text
    # Evaluation data is untouched.
    np.testing.assert_array_equal(pipe.eval_encoded.src, base.eval_encoded.src)
    np.testing.assert_array_equal(pipe.test_encoded.tgt, base.test_encoded.tgt)
    # A joined pair holds two sentences: two "." source tokens before its one <eos>.
    dot = pipe.src_tokenizer.token_to_id(".")
    encoded = pipe.train_iter._encoded  # noqa: SLF001
    dots = [(row[:n] == dot).sum() for row, n in zip(encoded.src, encoded.src_len, strict=True)]
    assert max(dots[len(base.train_iter._encoded) :]) >= 2


def test_packed_pipeline_reads_every_training_pair_whole_in_one_shape(
    tmp_path, small_zip, make_cfg, caplog
):
    cfg = make_cfg(small_zip, bucketing=False, packing=True, batch_tokens=40)
    cfg.drop_remainder = False
    with caplog.at_level("INFO"):
        pipe = pipeline.create_input_pipeline(cfg, row_multiple=2)
    assert "Data: packed rows of 10 source / 10 target tokens, 4 rows a batch" in caplog.text
    encoded = pipe.train_iter._encoded  # noqa: SLF001
    want = sorted(tuple(row[:n]) for row, n in zip(encoded.src, encoded.src_len, strict=True))
    got, shapes = [], set()
    for batch in pipe.train_iter.epoch_batches(0):
        shapes.add(batch["src"].shape)
        for row, segments in zip(batch["src"], batch["src_segment"], strict=True):
            got.extend(tuple(row[segments == k]) for k in range(1, segments.max() + 1))
    assert got and sorted(got) == want and shapes == {(4, 10)}
