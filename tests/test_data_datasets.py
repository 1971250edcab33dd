"""Other TFDS translation datasets through the same pipeline, with tfds.testing.mock_data."""

import pytest
import tensorflow_datasets as tfds

from transformer_jax.data import config as config_lib
from transformer_jax.data import datasets, pipeline


def _cfg(tmp_path, name, source_lang, target_lang, **overrides):
    cfg = config_lib.data_config()
    cfg.name = name
    cfg.source_lang, cfg.target_lang = source_lang, target_lang
    cfg.data_dir = str(tmp_path / "tfds")
    cfg.tokenizer = "word"
    cfg.min_freq = 1
    cfg.batch_size = 4
    cfg.bucketing = False
    cfg.max_src_len = cfg.max_tgt_len = 12
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


@pytest.mark.parametrize(
    ("name", "source_lang", "target_lang"),
    [("ted_hrlr_translate/pt_to_en", "pt", "en"), ("wmt14_translate/de-en", "de", "en")],
)
def test_mock_translation_dataset_reads_feature_keys(tmp_path, name, source_lang, target_lang):
    cfg = _cfg(tmp_path, name, source_lang, target_lang)
    with tfds.testing.mock_data(num_examples=10):
        # First: WMT builders are registered only once `tensorflow_datasets.translate` is
        # imported, which load_split_pairs does when a name is not found.
        pairs = datasets.load_split_pairs(cfg, "train")
        mocked = tfds.data_source(name, split="train")
        expected = [(r[source_lang].strip(), r[target_lang].strip()) for r in mocked]
    assert pairs == expected and len(pairs) == 10


@pytest.mark.parametrize(
    ("book_preprocessing", "expected"),
    [(False, ("Olá, mundo!", "Hello,\u00a0world!")), (True, ("olá , mundo !", "hello , world !"))],
)
def test_book_preprocessing_is_switchable(tmp_path, book_preprocessing, expected):
    cfg = _cfg(
        tmp_path,
        "ted_hrlr_translate/pt_to_en",
        "pt",
        "en",
        book_preprocessing=book_preprocessing,
    )
    # as_data_source_fn: our own records (random mock letters have no case or punctuation).
    records = [{"pt": b" Ol\xc3\xa1, mundo! ", "en": "Hello,\u00a0world!"}]
    with tfds.testing.mock_data(as_data_source_fn=lambda *args, **kwargs: records):
        assert datasets.load_split_pairs(cfg, "train") == [expected]


def test_whole_pipeline_on_mock_wmt(tmp_path):
    cfg = _cfg(tmp_path, "wmt14_translate/de-en", "de", "en")
    with tfds.testing.mock_data(num_examples=12):
        pipe = pipeline.create_input_pipeline(cfg, row_multiple=2, cache_dir=tmp_path / "tok")
    batch = next(pipe.train_iter)
    assert batch["src"].shape == (4, 12)  # per-process rows, no device axis
    assert pipe.split_sizes["selected_train"] == 12
    # Round trip through the batch: the decoded source is one of the training sentences.
    with tfds.testing.mock_data(num_examples=12):
        train = datasets.load_split_pairs(cfg, "train")
    assert pipe.src_tokenizer.decode(batch["src"][0]) in {s for s, _ in train}
