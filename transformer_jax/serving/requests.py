"""What a `POST /translate` body may hold, checked before anything is queued.

    limits = Limits(max_sentences=64, max_chars=1000, max_body_bytes=1 << 20)
    lines, given = parse_translate(body_bytes, limits)   # or RequestError(status, reason)
    options = DecodeOptions.from_mapping({**server_defaults, **given})   # ValueError: 400

The body is UTF-8 JSON, an object:

    {"text": ["go .", "i lost ."], "beam_size": 4, "alpha": 0.6, "nbest": 2}

- `text`: a string (one sentence) or a list of 1..`max_sentences` strings; each valid Unicode
  (no lone surrogate: JSON's `"\\ud800"` escape alone is one), at most `max_chars` characters,
  and not empty: something to translate once the translator's cleaning has removed control
  characters, ANSI escapes, spaces and invisible format characters (`blank`). An empty input
  is a mistake here (translate's files keep blank lines to stay aligned, each an empty
  translation; a request has no lines to keep aligned).
- decoding options, each optional (absent or null: the server's default): the fields of
  `decoding.options.DecodeOptions` (beam_size, alpha, nbest, temperature, top_k, top_p,
  seed, prefix), which checks their values; here only what the server bounds: beam_size and
  nbest at most `max_beam_size`, a prefix list with one entry per sentence, each prefix valid
  Unicode.

Every mistake is a `RequestError` with an HTTP status (400; 413 for a body over
`max_body_bytes`, checked by the app while it reads) and a one-line reason that names the
fix. Our own checks, not pydantic's, so that the reason is one line and an unknown key gets
a did-you-mean.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import unicodedata
from typing import Any

from transformer_jax.data.text_form import clean_text
from transformer_jax.decoding.options import DecodeOptions


class RequestError(Exception):
    """A bad request: the HTTP status and a one-line reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = " ".join(str(reason).split())


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may carry (the server's `--max_*` flags)."""

    max_sentences: int = 64  # sentences per request
    max_chars: int = 1000  # characters per sentence
    max_body_bytes: int = 1 << 20  # bytes of the body (413 above)
    max_beam_size: int = 16  # most beam_size and nbest: a larger beam costs every merged request

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field.name} must be an integer >= 1, got {value!r}.")


FIELDS = ("text", *DecodeOptions.field_names())
EXAMPLE = '{"text": ["go ."]}'


def parse_translate(body: bytes, limits: Limits) -> tuple[list[str], dict[str, Any]]:
    """The sentences and the decoding options given (null ones left out) of a `/translate`
    body; RequestError(400) on any mistake."""
    data = parse_json(body)
    if not isinstance(data, dict):
        raise RequestError(
            400, f"the body must be a JSON object like {EXAMPLE}, got {_kind(data)}."
        )
    unknown = [key for key in data if key not in FIELDS]
    if unknown:
        raise RequestError(
            400,
            f"unknown field {unknown[0]!r}{_did_you_mean(unknown[0])}; "
            f"fields: {', '.join(FIELDS)}.",
        )
    if "text" not in data:
        raise RequestError(400, f'the body has no "text"; send e.g. {EXAMPLE}.')
    lines = check_text(data["text"], limits)
    given = {k: v for k, v in data.items() if k != "text" and v is not None}
    for name in ("beam_size", "nbest"):
        value = given.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > limits.max_beam_size:
            raise RequestError(
                400, f"{name}={value} is over the server's limit of {limits.max_beam_size}."
            )
    prefix = given.get("prefix")
    if isinstance(prefix, list):
        if len(prefix) != len(lines):
            raise RequestError(
                400,
                f'"prefix" has {len(prefix)} entries for {len(lines)} sentences: give one per '
                "sentence, or one string for all.",
            )
        given["prefix"] = tuple(prefix)
    prefixes = given.get("prefix") if isinstance(prefix, list) else [prefix]
    if any(isinstance(p, str) and len(p) > limits.max_chars for p in prefixes):
        raise RequestError(400, f'a "prefix" is longer than {limits.max_chars} characters.')
    for p in prefixes:
        if isinstance(p, str):
            _check_unicode(p, '"prefix"')
    return lines, given


def decode_options(defaults: dict[str, Any], given: dict[str, Any]) -> DecodeOptions:
    """The request's options over the server's defaults, validated (RequestError(400) with
    DecodeOptions' one-line reason)."""
    names = DecodeOptions.field_names()
    try:
        return DecodeOptions.from_mapping(
            {**{k: v for k, v in defaults.items() if k in names}, **given}
        )
    except (TypeError, ValueError) as error:
        raise RequestError(400, str(error)) from None


def parse_json(body: bytes) -> Any:
    """The JSON value of a UTF-8 body; RequestError(400) naming the first bad byte or the
    JSON mistake (NaN and Infinity are not JSON)."""
    if not body.strip():
        raise RequestError(400, f"the body is empty; send a JSON object like {EXAMPLE}.")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(
            400, f"the body is not valid UTF-8 (byte {error.start}); send UTF-8 JSON."
        ) from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise RequestError(
            400, f"invalid JSON: {error.msg} at line {error.lineno} column {error.colno}."
        ) from None
    except ValueError as error:  # _no_constant
        raise RequestError(400, f"invalid JSON: {error}.") from None
    except RecursionError:  # the parser recurses per level: "[[[[..." deeper than Python's stack
        raise RequestError(
            400, f"invalid JSON: arrays or objects nested too deeply; send e.g. {EXAMPLE}."
        ) from None


def check_text(text: Any, limits: Limits) -> list[str]:
    """`text` as a list of sentences; RequestError(400) unless it is a string or a list of
    1..max_sentences strings, each valid Unicode, not `blank` and at most max_chars
    characters."""
    lines = [text] if isinstance(text, str) else text
    if not isinstance(lines, list):
        raise RequestError(400, f'"text" must be a string or a list of strings, got {_kind(text)}.')
    if not lines:
        raise RequestError(400, '"text" is an empty list; send at least one sentence.')
    if len(lines) > limits.max_sentences:
        raise RequestError(
            400,
            f'"text" has {len(lines)} sentences, more than {limits.max_sentences} per request; '
            "send them in several requests.",
        )
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise RequestError(400, f'"text"[{i}] must be a string, got {_kind(line)}.')
        _check_unicode(line, f'"text"[{i}]')
        if blank(line):
            raise RequestError(400, f'"text"[{i}] is empty; send a sentence to translate.')
        if len(line) > limits.max_chars:
            raise RequestError(
                400,
                f'"text"[{i}] has {len(line)} characters, more than {limits.max_chars}; '
                "split it into shorter sentences.",
            )
    return lines


def blank(text: str) -> bool:
    """Whether `text` has nothing to translate: nothing but what the translator's cleaning
    (`data.text_form.clean_text`, then strip) removes or turns into spaces (control
    characters, ANSI escapes, U+2028/U+2029, no-break spaces) and invisible format characters
    (category Cf: U+200B zero-width space, U+FEFF byte-order mark, ...), which the
    SentencePiece tokenizer drops. One rule for every such input: "\\x00", "\\u200b", "\\ufeff",
    "\\x1b[31m", "\\u00a0" and "\\u2028" are all empty."""
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in clean_text(text))


def _check_unicode(text: str, what: str) -> None:
    """RequestError(400) if `text` holds a lone surrogate (valid JSON, as "\\ud800", but not
    Unicode text: no UTF-8 encoding, no tokenizer takes it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        raise RequestError(
            400,
            f"{what} is not valid Unicode: a lone surrogate U+{code:04X} at character "
            f"{error.start}; send text as UTF-8 (a JSON \\u escape of a surrogate must be a "
            "high one followed by a low one).",
        ) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _did_you_mean(key: str) -> str:
    close = difflib.get_close_matches(key, FIELDS, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    names.update({int: "a number", float: "a number", type(None): "null"})
    return names.get(type(value), type(value).__name__)
