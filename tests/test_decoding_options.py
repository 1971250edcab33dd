"""decoding/options.py: DecodeOptions' defaults, validation and from_mapping."""

import pytest

from transformer_jax.decoding.defaults import DEFAULTS, OPTION_DEFAULTS
from transformer_jax.decoding.options import DecodeOptions, options_of


def test_defaults_come_from_the_table():
    options = DecodeOptions()
    for name in DecodeOptions.field_names():
        assert getattr(options, name) == {**DEFAULTS, **OPTION_DEFAULTS}[name], name
    assert options.validate() is options
    assert not options.sampling


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("beam_size", 0, "beam_size must be an integer >= 1"),
        ("beam_size", 2.0, "beam_size must be an integer >= 1"),
        ("alpha", -0.1, "alpha must be a number >= 0"),
        ("alpha", float("nan"), "alpha must be a number >= 0"),
        ("nbest", 0, "nbest must be an integer >= 1"),
        ("temperature", -1.0, "temperature must be a number >= 0"),
        ("top_k", -1, "top_k must be an integer >= 0"),
        ("top_p", 0.0, "top_p must be a number in (0, 1]"),
        ("top_p", 1.5, "top_p must be a number in (0, 1]"),
        ("seed", -3, "seed must be an integer in [0, 2**32)"),
        ("seed", True, "seed must be an integer in [0, 2**32)"),
        # Sampling keys take a uint32: 2**32 passed the check, then overflowed in decoding.
        ("seed", 2**32, "seed must be an integer in [0, 2**32), got 4294967296"),
        ("prefix", 3, "prefix must be None, a string or a list of strings"),
    ],
)
def test_validate_names_the_field_and_range(field, value, words):
    with pytest.raises(ValueError) as error:
        DecodeOptions(**{field: value}).validate()
    message = str(error.value)
    assert words in message and "\n" not in message


def test_nbest_beyond_the_beam_is_one_line():
    with pytest.raises(ValueError, match=r"nbest=3 is more than beam_size=2.*beam_size >= 3"):
        DecodeOptions(beam_size=2, nbest=3).validate()
    DecodeOptions(beam_size=3, nbest=3).validate()
    # Sampling draws nbest samples whatever the beam.
    assert DecodeOptions(nbest=5, temperature=1.0).validate().sampling


def test_from_mapping_rejects_unknown_keys_with_a_suggestion():
    with pytest.raises(
        ValueError,
        match=r"unknown decoding option 'temprature' \(did you mean "
        r"'temperature'\?\)",
    ):
        DecodeOptions.from_mapping({"temprature": 1.0})
    with pytest.raises(ValueError, match="unknown decoding option 'zzz'; valid ones are beam_size"):
        DecodeOptions.from_mapping({"zzz": 1})


def test_from_mapping_fills_defaults_and_validates():
    options = DecodeOptions.from_mapping({"nbest": 2, "beam_size": 4, "top_k": None})
    assert (options.nbest, options.beam_size, options.top_k) == (2, 4, OPTION_DEFAULTS["top_k"])
    with pytest.raises(ValueError, match="top_p must be"):
        DecodeOptions.from_mapping({"top_p": 2})


def test_prefixes_one_per_sentence():
    assert DecodeOptions(prefix="je").prefixes(2) == ["je", "je"]
    assert DecodeOptions().prefixes(2) == ["", ""]
    per_sentence = DecodeOptions(prefix=["il", None])
    assert per_sentence.prefix == ("il", None)  # a list is kept as a (hashable) tuple
    hash(per_sentence)
    assert per_sentence.prefixes(2) == ["il", ""]
    with pytest.raises(ValueError, match="prefix has 2 entries for 3 sentences"):
        per_sentence.prefixes(3)


def test_options_of_settings():
    settings = {**DEFAULTS, "beam_size": 4, "nbest": 4, "max_len_a": 1.0}
    assert options_of(settings) == DecodeOptions(beam_size=4, nbest=4)
