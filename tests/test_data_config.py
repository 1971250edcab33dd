"""Data config defaults and validation messages."""

import pytest

from transformer_jax.data import config as config_lib


def test_default_config_is_valid():
    cfg = config_lib.data_config()
    config_lib.validate_data_config(cfg, num_devices=2, process_count=2)
    assert cfg.name == "fra_eng" and (cfg.source_lang, cfg.target_lang) == ("en", "fr")


@pytest.mark.parametrize(
    ("key", "value", "kwargs", "message"),
    [
        ("tokenizer", "bytes", {}, r"data.tokenizer='bytes'.*'word', 'sentencepiece'"),
        ("sp_model_type", "char", {}, r"sp_model_type='char'.*'unigram', 'bpe'"),
        ("max_src_len", 1, {}, r"data.max_src_len=1 .*>= 2"),
        ("max_tgt_len", 0, {}, r"data.max_tgt_len=0"),
        ("batch_size", 100, {"num_devices": 8}, r"batch_size=100 .*1 \* 8 = 8.*e.g. 96"),
        ("batch_size", 12, {"num_devices": 2, "process_count": 4}, r"4 \* 2 = 8"),
        ("validation_fraction", 1.5, {}, r"validation_fraction=1.5"),
        ("test_fraction", 0.6, {}, r"leaves no training data"),
        ("source_lang", "de", {}, r"fra_eng has languages"),
        ("bucket_boundaries", (16, 8), {}, r"bucket_boundaries=\(16, 8\).*increasing"),
        ("num_eval_examples", -1, {}, r"num_eval_examples=-1"),
        ("long_pairs", "cut", {}, r"long_pairs='cut'.*'skip', 'truncate'"),
        ("batch_tokens", -5, {}, r"batch_tokens=-5 needs"),
        ("batch_tokens", 100, {"num_devices": 2}, r"batch_tokens=100 .*64 x 2 .*use >= 128"),
        ("packing", True, {}, r"data.packing=True .*set data.bucketing=False"),
    ],
)
def test_validation_names_bad_value(key, value, kwargs, message):
    cfg = config_lib.data_config()
    if key == "test_fraction":
        cfg.validation_fraction = 0.5
    cfg[key] = value
    with pytest.raises(ValueError, match=message):
        config_lib.validate_data_config(cfg, **kwargs)


def test_packing_without_buckets_is_valid_and_takes_the_token_budget():
    cfg = config_lib.data_config()
    cfg.packing, cfg.bucketing, cfg.batch_tokens = True, False, 2048
    config_lib.validate_data_config(cfg, num_devices=2)
    cfg.packing = False  # a token budget needs buckets or packed rows
    with pytest.raises(ValueError, match="needs data.bucketing=True or data.packing=True"):
        config_lib.validate_data_config(cfg)


def test_unknown_key_lists_valid_keys():
    cfg = config_lib.data_config()
    with cfg.unlocked():
        cfg.batchsize = 3
    with pytest.raises(ValueError, match=r"unknown \['batchsize'\].*valid keys.*'batch_size'"):
        config_lib.validate_data_config(cfg)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("train_split", "trian[:1000]", r"names the split 'trian'.*\['train', 'validation', "
         r"'test', 'full'\] \(did you mean 'train'\?\)"),
        ("eval_split", "validation[:10", r"'validation\[:10' is not a TFDS split.*name\[from:to\]"),
        ("test_split", "test[::2]", r"'test\[::2\]' is not a TFDS split"),
        ("train_split", "train[:200%]", r"percent slice boundaries"),
        ("train_split", "", r"data.train_split='' is not a split"),
        ("train_split", "train+valid", r"names the split 'valid'"),
    ],
)  # fmt: skip
def test_split_strings_are_checked_without_building(key, value, message):
    cfg = config_lib.data_config()
    cfg[key] = value
    with pytest.raises(ValueError, match=message):
        config_lib.validate_data_config(cfg)


@pytest.mark.parametrize(
    "split", ["train", "full[:601]", "train[:2000]", "train[10%:]+validation", "all"]
)
def test_valid_fra_eng_splits_pass(split):
    cfg = config_lib.data_config()
    cfg.train_split = split
    config_lib.validate_data_config(cfg)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("fra_eng2", r"TFDS has no dataset 'fra_eng2' \(did you mean 'fra_eng'\?\).*'wmt14_tr"),
        ("ted_hrlr_translate/xx", r"has no config 'xx'; choose one of .*'ted_hrlr_translate/pt"),
        ("", r"data.name='' is not a dataset name"),
    ],
)
def test_dataset_name_is_looked_up_in_the_tfds_registry(name, message):
    cfg = config_lib.data_config()
    cfg.name, cfg.source_lang, cfg.target_lang = name, "pt", "en"
    with pytest.raises(ValueError, match=message):
        config_lib.validate_data_config(cfg)


def test_catalogue_names_pass_and_their_split_names_are_left_to_tfds():
    cfg = config_lib.data_config()
    cfg.name, cfg.source_lang, cfg.target_lang = "wmt14_translate/de-en", "de", "en"
    cfg.train_split = "newstest2013[:100]"  # a split only the built dataset knows
    config_lib.validate_data_config(cfg)
    cfg.train_split = "train[:100"
    with pytest.raises(ValueError, match="not a TFDS split"):
        config_lib.validate_data_config(cfg)
