"""`serving.requests`: what a /translate body may hold, and the one-line reason for each
mistake (no server: the HTTP tests send the same bodies to a real one)."""

from __future__ import annotations

import json

import pytest

from transformer_jax.decoding.options import DecodeOptions
from transformer_jax.serving.requests import Limits, RequestError, decode_options, parse_translate

LIMITS = Limits(max_sentences=3, max_chars=20, max_body_bytes=1000, max_beam_size=8)


def parse(body):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_translate(raw, LIMITS)


def test_text_is_a_string_or_a_list_and_null_options_are_left_out():
    assert parse({"text": "go ."}) == (["go ."], {})
    assert parse({"text": ["go .", "i lost ."], "beam_size": 4, "alpha": None}) == (
        ["go .", "i lost ."],
        {"beam_size": 4},
    )
    lines, given = parse({"text": ["a", "b"], "prefix": ["x", None], "nbest": 2})
    assert given == {"prefix": ("x", None), "nbest": 2}  # a tuple: hashable, batchable


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"", "the body is empty"),
        (b'{"text": "a"', "invalid JSON: Expecting ',' delimiter at line 1 column 13"),
        (b'{"text": "a", "alpha": NaN}', "invalid JSON: NaN is not a JSON number"),
        (b'{"text": "\xff"}', "not valid UTF-8 (byte 10)"),
        (["go ."], "must be a JSON object"),
        ({"txt": "go ."}, "unknown field 'txt' (did you mean 'text'?)"),
        ({"text": "a", "beam": 2}, "unknown field 'beam' (did you mean 'beam_size'?)"),
        ({"beam_size": 2}, 'the body has no "text"'),
        ({"text": 3}, '"text" must be a string or a list of strings, got a number'),
        ({"text": []}, '"text" is an empty list'),
        ({"text": ["a", 1]}, '"text"[1] must be a string, got a number'),
        ({"text": ["a", "  "]}, '"text"[1] is empty'),
        ({"text": ["a"] * 4}, '"text" has 4 sentences, more than 3 per request'),
        ({"text": "a" * 21}, '"text"[0] has 21 characters, more than 20'),
        ({"text": "a", "beam_size": 9}, "beam_size=9 is over the server's limit of 8"),
        ({"text": ["a", "b"], "prefix": ["x"]}, '"prefix" has 1 entries for 2 sentences'),
        ({"text": "a", "prefix": "p" * 21}, '"prefix" is longer than 20 characters'),
        # Valid JSON, but not Unicode text: no tokenizer takes a lone surrogate.
        ({"text": ["a", "b \ud800 c"]}, '"text"[1] is not valid Unicode: a lone surrogate U+D800'),
        ({"text": "a", "prefix": "\udc00"}, '"prefix" is not valid Unicode'),
        # The parser recurses per level: deeper than Python's stack is a reason, not a 500.
        (b"[" * 100_000, "invalid JSON: arrays or objects nested too deeply"),
        (b'{"text": ' + b"[" * 100_000, "invalid JSON: arrays or objects nested too deeply"),
    ],
)
def test_each_mistake_is_a_400_with_one_line(body, reason):
    with pytest.raises(RequestError) as error:
        parse(body)
    assert error.value.status == 400
    assert reason in error.value.reason and "\n" not in error.value.reason


@pytest.mark.parametrize(
    "text", [" \t", "\x00", "\u200b", "\ufeff", "\x1b[31m", "\u00a0", "\u2028", "\ufeff\x00 \u200b"]
)
def test_text_the_translator_cleans_to_nothing_is_empty_whatever_it_held(text):
    """One rule after the translator's cleaning (control characters, ANSI escapes, spaces)
    and the tokenizer's (invisible format characters): each of these would translate to ""."""
    with pytest.raises(RequestError, match=r'"text"\[0\] is empty') as error:
        parse({"text": text})
    assert error.value.status == 400
    assert parse({"text": "a\u200bb\x00"}) == (["a\u200bb\x00"], {})  # text around them


def test_options_go_over_the_defaults_and_decode_options_checks_their_values():
    defaults = {"beam_size": 4, "alpha": 0.6, "batch_size": 64}  # a non-option key: ignored
    assert decode_options(defaults, {}) == DecodeOptions(beam_size=4, alpha=0.6)
    assert decode_options(defaults, {"nbest": 2}).nbest == 2  # <= the default beam of 4
    for given, reason in [
        ({"beam_size": 0}, "beam_size must be an integer >= 1"),
        ({"beam_size": "4"}, "beam_size must be an integer >= 1"),
        ({"alpha": -1}, "alpha must be a number >= 0"),
        ({"nbest": 5}, "nbest=5 is more than beam_size=4"),
    ]:
        with pytest.raises(RequestError, match=reason) as error:
            decode_options(defaults, given)
        assert error.value.status == 400


def test_limits_must_be_positive_integers():
    with pytest.raises(ValueError, match="max_chars must be an integer >= 1"):
        Limits(max_chars=0)
