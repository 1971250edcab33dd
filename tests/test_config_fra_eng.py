"""configs/fra_eng.py variants and whole-config validation (before anything compiles)."""

from __future__ import annotations

import subprocess
import sys

import ml_collections
import pytest

from configs import fra_eng
from tests.helpers import REPO, subprocess_env
from transformer_jax import launch
from transformer_jax.training import config as config_lib


@pytest.mark.parametrize(
    "arg",
    [
        None,
        "d2l",
        "deep_sampled",
        "runlocal",
        "deep_sampled,runlocal",
        "variant=small,runlocal",
        "base",
    ],
)
def test_every_variant_validates(arg):
    config_lib.validate_config(fra_eng.get_config(arg), num_devices=1)


def test_d2l_variant_is_the_books_setting():
    c = fra_eng.get_config("d2l")
    m = c.model
    assert (m.num_encoder_layers, m.num_decoder_layers, m.model_dim, m.num_heads, m.ffn_dim) == (
        2, 2, 32, 4, 64,
    )  # fmt: skip
    assert m.dropout_rate == m.attention_dropout_rate == 0.1
    # load_data_nmt(num_examples=600) keeps lines 0..600, and its DataLoader the last batch.
    assert c.data.train_split == "full[:601]" and c.data.drop_remainder is False
    assert c.data.tokenizer == "word"
    assert c.data.min_freq == 2 and c.data.max_src_len == c.data.max_tgt_len == 10
    assert c.data.batch_size == 64
    assert (c.optimizer, c.schedule, c.learning_rate, c.clip_norm) == ("adam", "constant", 0.005, 1)
    assert c.label_smoothing == 0.0 and c.num_epochs == 200 and c.num_train_steps == 0


def test_runs_keep_whole_pairs_and_only_the_book_truncates():
    for arg in (None, "deep_sampled", "small", "base", "runlocal"):
        c = fra_eng.get_config(arg)
        assert c.data.long_pairs == "skip", arg
    assert fra_eng.get_config("d2l").data.long_pairs == "truncate"
    default = fra_eng.get_config()
    assert default.data.max_src_len == default.data.max_tgt_len == 64
    # Packed rows of the longest kept pair's width: one train-step shape for both runs.
    assert default.data.packing and not default.data.bucketing
    deep = fra_eng.get_config("deep_sampled")
    assert deep.data.packing and not deep.data.bucketing
    assert deep.data.max_src_len == deep.data.max_tgt_len == 64
    assert deep.data.batch_tokens == 4096  # 64 packed rows
    assert default.eval.num_test_examples == 1000


def test_readme_run_and_deep_sampled_share_one_tied_vocabulary_and_others_keep_two():
    for arg in (None, "deep_sampled"):
        c = fra_eng.get_config(arg)
        assert c.data.shared_vocab and c.data.vocab_size == 4000, arg
        assert c.model.share_embeddings and c.model.tie_output, arg
        config_lib.validate_config(c, num_devices=1)
    small = fra_eng.get_config("small")
    assert not (small.data.shared_vocab or small.model.share_embeddings)


def test_readme_run_and_deep_sampled_translate_with_beams_and_the_book_and_runlocal_greedily():
    from transformer_jax.inference import decode_settings

    for arg, beams in ((None, 4), ("deep_sampled", 6)):  # one setting: reports, translate, evaluate
        c = fra_eng.get_config(arg)
        assert c.eval.beam_size == beams and c.eval.alpha == (1.0 if arg else 0.6), arg
        assert decode_settings(c)["beam_size"] == beams, arg
        assert decode_settings(c)["alpha"] == c.eval.alpha, arg
        assert decode_settings(c, beam_size=1)["beam_size"] == 1  # --beam_size=1 wins
    for arg in ("d2l", "runlocal", "deep_sampled,runlocal", "small"):
        assert fra_eng.get_config(arg).eval.beam_size == 1, arg
    # The beam pays for a third of the README run's steps (configs/fra_eng.py).
    assert fra_eng.get_config().num_train_steps == 1500


def test_deep_sampled_recipe_is_the_readme_run_deeper_and_longer():
    default, deep = fra_eng.get_config(), fra_eng.get_config("deep_sampled")
    assert default.model.num_encoder_layers == default.model.num_decoder_layers == 2
    assert deep.model.num_encoder_layers == deep.model.num_decoder_layers == 3
    # Both norm first at a peak of 8e-3 (the hour was measured so on 2026-11-25).
    assert (default.model.norm_placement, default.learning_rate) == ("pre", 8e-3)
    assert (deep.model.norm_placement, deep.learning_rate) == ("pre", 8e-3)
    deep.model.num_encoder_layers = deep.model.num_decoder_layers = 2
    assert deep.model == default.model  # only the depth differs
    assert default.data.concat_fraction == 0.2 and deep.data.concat_fraction == 0.0
    deep.data.concat_fraction = default.data.concat_fraction  # they did not help the hour
    # The hour reads its sentences with drawn segmentations (subword regularization).
    assert (deep.data.sp_sampling_alpha, default.data.sp_sampling_alpha) == (0.5, 0.0)
    deep.data.sp_sampling_alpha = 0.0
    # Twice the README run's tokens a batch: XLA:CPU runs them faster per token.
    assert (deep.data.batch_tokens, default.data.batch_tokens) == (4096, 2048)
    deep.data.batch_tokens = default.data.batch_tokens
    assert deep.data == default.data
    assert deep.schedule == default.schedule == "linear"
    assert deep.num_train_steps == 8_000 > default.num_train_steps
    # The hour's beam width and length penalty were chosen on the validation split (the
    # README run keeps 4 beams at GNMT's 0.6), and the README run leaves validation BLEU to
    # its test report.
    assert (deep.eval.beam_size, default.eval.beam_size) == (6, 4)
    assert (deep.eval.alpha, default.eval.alpha) == (1.0, 0.6)
    assert (deep.eval.num_bleu_examples, default.eval.num_bleu_examples) == (100, 0)
    deep.eval.beam_size, deep.eval.alpha = default.eval.beam_size, default.eval.alpha
    deep.eval.num_bleu_examples = 0
    assert deep.eval == default.eval
    # The linear decay reaches 0 at the recipe's own end; validation runs twice.
    assert deep.eval_every_steps == deep.num_train_steps // 2


def test_epochs_are_converted_to_steps_in_one_place():
    c = fra_eng.get_config("d2l")
    steps_per_epoch = -(-601 // c.data.batch_size)  # 10: the last batch holds 25 pairs
    assert config_lib.resolve_num_train_steps(c, steps_per_epoch) == 2000
    c.num_epochs, c.num_train_steps = 0, 77
    assert config_lib.resolve_num_train_steps(c, steps_per_epoch) == 77


def test_bad_variant_argument_lists_the_choices():
    with pytest.raises(ValueError, match="d2l"):
        fra_eng.get_config("huge")
    with pytest.raises(ValueError, match="runlocal"):
        fra_eng.get_config("runlocal=yes")


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.update({"learning_rat": 1.0}), "unknown \\['learning_rat'\\].*learning_rate"),
        (lambda c: c.update({"parallelism": "dp"}), "pmap.*shard_map"),
        (lambda c: c.update({"optimizer": "sgd"}), "adam"),
        (lambda c: c.update({"num_epochs": 3}), "exactly one of num_train_steps"),
        (lambda c: c.update({"grad_accum_steps": 3}), "must divide the rows each device"),
        (lambda c: c.update({"label_smoothing": 1.0}), "label_smoothing"),
        (lambda c: c.eval.update({"beam_size": 0}), "eval.beam_size"),
        (lambda c: c.eval.update({"segment_len": -1}), "eval.segment_len must be an integer >= 0"),
        (lambda c: c.model.update({"num_heads": 3}), "num_heads"),
        (lambda c: c.data.update({"tokenizer": "bpe"}), "sentencepiece"),
        (lambda c: c.data.update({"drop_remainder": None}), "drop_remainder=None.*False"),
        (lambda c: c.model.update({"max_len": 8, "positional": "learned"}), "max_len=8"),
        # A section written as a plain dict in a config file is not typed by ml_collections:
        (
            lambda c: setattr(c, "model", _section(c.model, num_heads="4")),
            r"model.num_heads='4' must be an integer \(the default is 4\)",
        ),
        (
            lambda c: setattr(c, "data", _section(c.data, bucketing=1)),
            r"data.bucketing=1 must be True or False",
        ),
        (
            lambda c: setattr(c, "data", _section(c.data, packing="yes")),
            r"data.packing='yes' must be True or False",
        ),
        (
            lambda c: setattr(c, "eval", _section(c.eval, alpha="0.6")),
            r"eval.alpha='0.6' must be a number",
        ),
    ],
)
def test_validation_names_the_value_and_the_fix(change, message):
    c = fra_eng.get_config()
    change(c)
    with pytest.raises(ValueError, match=message):
        config_lib.validate_config(c, num_devices=1)


def _section(section, **changes):
    return ml_collections.ConfigDict({**section.to_dict(), **changes})


def test_errors_are_one_line_config_errors():
    c = fra_eng.get_config()
    c.model.num_heads = 3
    with pytest.raises(config_lib.ConfigError) as info:
        config_lib.validate_config(c)
    assert "\n" not in str(info.value) and "Valid num_heads for this D" in str(info.value)


def test_a_config_changed_after_it_validated_is_validated_again():
    c = fra_eng.get_config("runlocal")
    config_lib.validate_config(c)
    c.learning_rate = -1.0
    with pytest.raises(config_lib.ConfigError, match="learning_rate=-1.0"):
        config_lib.validate_config(c)
    c.learning_rate = 0.005
    config_lib.validate_config(c)
    # The devices are checked on every call (the launcher validates before it knows them).
    c.data.batch_size = 30
    config_lib.validate_config(c, num_devices=1)
    with pytest.raises(config_lib.ConfigError, match=r"batch_size=30 .*multiple"):
        config_lib.validate_config(c, num_devices=4)


def test_unknown_override_lists_the_valid_keys():
    c = fra_eng.get_config()
    with pytest.raises(config_lib.ConfigError, match=r"'data.batchsize'.*Valid keys.*batch_size"):
        launch.check_overrides(c, ["--config.data.batchsize=3"])
    launch.check_overrides(c, ["--config.data.batch_size=3"])  # a known key: no error


def test_launcher_rejects_an_unknown_key_before_training(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.train", "--config=configs/fra_eng.py:runlocal",
         f"--workdir={tmp_path}", "--config.eval.beam=4"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    assert "Unknown config key 'eval.beam'" in result.stderr and "beam_size" in result.stderr
    assert not (tmp_path / "checkpoints").exists()
