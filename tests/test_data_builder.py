"""The fra_eng TFDS builder: splits, order, build stats, and the real corpus."""

import hashlib
import json
import shutil
import sys

import pytest

from transformer_jax.data import datasets, download, fra_eng, splitting

pytest_plugins = ["tests.conftest_data"]


def _all_splits(cfg):
    return {name: datasets.load_split_pairs(cfg, name) for name in ("train", "validation", "test")}


def test_builds_without_tensorflow_and_splits_by_source(make_cfg, small_zip):
    cfg = make_cfg(small_zip)
    splits = _all_splits(cfg)
    assert "tensorflow" not in sys.modules
    full = datasets.load_split_pairs(cfg, "full")
    # 60 sources x 3 translations; every pair lands in exactly one split.
    assert len(full) == 180
    assert sorted(p for s in splits.values() for p in s) == sorted(full)
    # Alternative translations stay together: no source sentence in two splits.
    by_split = {name: {src for src, _ in pairs} for name, pairs in splits.items()}
    assert not by_split["train"] & by_split["validation"]
    assert not by_split["train"] & by_split["test"]
    assert not by_split["validation"] & by_split["test"]
    # Split assignment is the documented hash rule, recomputed independently here.
    for name, pairs in splits.items():
        for src, _ in pairs:
            u = int.from_bytes(hashlib.sha256(f"0\x00{src}".encode()).digest()[:8], "big") / 2**64
            expected = "test" if u < 0.2 else "validation" if u < 0.4 else "train"
            assert name == expected
    # With 60 sources and 20%/20%, each held-out split gets some (binomial, fixed by hash).
    assert all(len(by_split[n]) > 3 for n in ("validation", "test"))


def test_full_split_is_in_file_order_and_sliceable(make_cfg, small_zip, synthetic_lines):
    cfg = make_cfg(small_zip)
    lines = synthetic_lines()
    expected = [
        (a.lower().replace(".", " .").replace("!", " !").replace("?", " ?"), b.lower())
        for a, b in (line.split("\t") for line in lines[:7])
    ]
    assert datasets.load_split_pairs(cfg, "full[:7]") == expected


def test_build_stats_in_metadata(tmp_path, make_zip, make_cfg, synthetic_lines):
    lines = synthetic_lines() + ["broken", "Hi.\t", b"\xff\tx"]
    zip_path = make_zip(tmp_path / "c.zip", lines)
    cfg = make_cfg(zip_path)
    builder = datasets.prepared_builder(cfg)
    meta = builder.info.metadata
    assert meta["read_report"]["malformed"] == {"bad_utf8": 1, "no_tab": 1, "empty_side": 1}
    assert meta["split_sizes"]["full"] == 180
    assert meta["zip_sha256"] == hashlib.sha256(zip_path.read_bytes()).hexdigest()
    # Persisted next to dataset_info.json, so later runs (and people) can read it.
    saved = json.loads((builder.data_path / "metadata.json").read_text())
    assert saved["read_report"]["kept"] == 180


def test_split_parameters_select_separate_builds(tmp_path, make_cfg, small_zip):
    cfg = make_cfg(small_zip)
    default = datasets.load_split_pairs(cfg, "test")
    cfg.split_seed = 1
    other = datasets.load_split_pairs(cfg, "test")
    assert default != other
    names = sorted(p.name for p in (tmp_path / "tfds" / "fra_eng").glob("val*"))
    assert names == ["val2000_test2000_seed0", "val2000_test2000_seed1"]


def test_split_fractions_are_roughly_honoured():
    counts = {name: 0 for name in splitting.SPLIT_NAMES}
    for i in range(20000):
        counts[
            splitting.split_of(f"s{i}", validation_fraction=0.1, test_fraction=0.05, seed=0)
        ] += 1
    assert abs(counts["test"] / 20000 - 0.05) < 0.01
    assert abs(counts["validation"] / 20000 - 0.10) < 0.01


def test_missing_zip_error_says_where_and_how(tmp_path, make_cfg):
    cfg = make_cfg(tmp_path / "nope.zip")
    with pytest.raises(download.ZipNotFoundError) as info:
        datasets.load_split_pairs(cfg, "train")
    message = str(info.value)
    assert str(tmp_path / "nope.zip") in message
    assert str(tmp_path / "tfds" / "downloads" / "manual" / "fra-eng.zip") in message
    assert "data.zip_path" in message and "manual dir" in message and "data.url" in message


def test_manual_dir_is_used(tmp_path, make_cfg, small_zip):
    cfg = make_cfg("")  # no data.zip_path: the manual dir is next
    manual = tmp_path / "tfds" / "downloads" / "manual"
    manual.mkdir(parents=True)
    (manual / "fra-eng.zip").write_bytes(small_zip.read_bytes())
    assert len(datasets.load_split_pairs(cfg, "full")) == 180


def test_configured_sha256_is_enforced_for_local_files(make_cfg, small_zip):
    cfg = make_cfg(small_zip, zip_sha256="0" * 64)
    with pytest.raises(download.ChecksumMismatchError, match="checksum mismatch"):
        datasets.load_split_pairs(cfg, "train")


# -- the real corpus ------------------------------------------------------------------------


def test_real_corpus_split_sizes_and_stats(real_builder):
    meta = real_builder.info.metadata
    sizes = {name: info.num_examples for name, info in real_builder.info.splits.items()}
    assert sizes["full"] == 167130
    assert sizes["train"] + sizes["validation"] + sizes["test"] == 167130
    assert meta["split_sizes"] == sizes
    assert meta["read_report"]["malformed"] == {"bad_utf8": 0, "no_tab": 0, "empty_side": 0}
    # 5% / 5% by source sentence; unique sources differ in translation counts, hence slack.
    for name in ("validation", "test"):
        assert 0.04 < sizes[name] / 167130 < 0.06
    assert meta["zip_sha256"] in download.KNOWN_DIGESTS["sha256"]


def test_real_corpus_first_pairs_and_no_source_overlap(real_cfg, real_builder):
    first = datasets.load_split_pairs(real_cfg, "full[:3]")
    assert first == [("go .", "va !"), ("hi .", "salut !"), ("run !", "cours !")]
    train = {src for src, _ in datasets.load_split_pairs(real_cfg, "train")}
    for held_out in ("validation", "test"):
        sources_held_out = {src for src, _ in datasets.load_split_pairs(real_cfg, held_out)}
        assert not train & sources_held_out, held_out


def test_builder_config_names():
    assert fra_eng.config_name(0.05, 0.05, 0) == "val500_test500_seed0"
    assert fra_eng.select_config(0.05, 0.05, 0) == "val500_test500_seed0"
    custom = fra_eng.select_config(0.1, 0.05, 3)
    assert custom.name == "val1000_test500_seed3" and custom.validation_fraction == 0.1


def test_too_small_corpus_is_a_clear_error(tmp_path, make_zip, make_cfg):
    zip_path = make_zip(tmp_path / "c.zip", ["Go.\tVa !", "Hi.\tSalut !"])
    with pytest.raises(ValueError, match=r"split '\w+' would be empty \(2 pairs read"):
        datasets.load_split_pairs(make_cfg(zip_path), "train")


def test_stale_build_from_another_zip_is_refused(tmp_path, make_cfg, small_zip, make_zip):
    cfg = make_cfg(small_zip)
    datasets.load_split_pairs(cfg, "train")
    other = make_zip(tmp_path / "other.zip", ["Go.\tVa !"] * 3)
    cfg.zip_path = str(other)
    with pytest.raises(datasets.DatasetReadError, match=r"built from a zip with sha256 .* Delete"):
        datasets.load_split_pairs(cfg, "train")


def _train_shard(cfg):
    (shard,) = datasets.prepared_builder(cfg).data_path.glob("fra_eng-train.array_record*")
    return shard


def test_a_damaged_or_missing_shard_is_one_error_naming_the_folder_and_a_rebuild_fixes_it(
    make_cfg, small_zip
):
    cfg = make_cfg(small_zip)
    pairs = datasets.load_split_pairs(cfg, "train")
    folder = datasets.prepared_builder(cfg).data_path
    for bad_split in ("trian", "train[5:2]"):  # the caller's mistake: never "delete the data"
        with pytest.raises(ValueError) as raised:
            datasets.load_split_pairs(cfg, bad_split)
        assert not isinstance(raised.value, datasets.DatasetReadError), raised.value
    shard = _train_shard(cfg)
    data = bytearray(shard.read_bytes())
    for i in range(200, min(len(data), 400)):  # the first records, past the file header
        data[i] ^= 0x5A
    shard.write_bytes(bytes(data))
    with pytest.raises(datasets.DatasetReadError, match=r"train split: .*Corrupted") as raised:
        datasets.load_split_pairs(cfg, "train")
    assert f"delete {folder} and run again to rebuild it from the corpus" in str(raised.value)
    shard.unlink()
    with pytest.raises(datasets.DatasetReadError, match=r"train split: .*No such file"):
        datasets.load_split_pairs(cfg, "train")
    # The advice works: without the folder the next read rebuilds the same pairs.
    shutil.rmtree(folder)
    assert datasets.load_split_pairs(cfg, "train") == pairs
