"""Text on machines whose locale is not UTF-8 (`LC_ALL=C`: ASCII; `fr_FR.ISO-8859-1`): files
the project writes are UTF-8 whatever the locale (a truecaser table written in Latin-1 left a
run that could never translate), translate refuses a stdout that cannot hold the model's
characters before decoding (was: every line lost after it), reports print what the terminal
cannot show as escapes, and a UTF-8 argument is not called invalid
(`evaluation.stream_encoding`, `data.truecasing`, `evaluation.text_lines`)."""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.data.truecasing import Truecaser
from transformer_jax.data.vocab import SPECIAL_TOKENS
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.evaluation import report as report_lib
from transformer_jax.evaluation.output_file import write_lines
from transformer_jax.evaluation.stream_encoding import (
    OutputEncodingError,
    lenient_stdout,
    printable,
    vocabulary_characters,
)
from transformer_jax.evaluation.text_lines import argument_text
from transformer_jax.evaluation.translate_cli import check_output, translate_stream

FRENCH = WordTokenizer([*SPECIAL_TOKENS, "où", "est", "le", "café", "?", "œuvre"])
ASCII = WordTokenizer([*SPECIAL_TOKENS, "where", "is", "the", "cafe", "?"])
FIXES = ("LC_ALL=C.UTF-8", "PYTHONIOENCODING=utf-8", "--output_file=FILE")


def ascii_locale_env(**extra: str) -> dict[str, str]:
    """A subprocess under the C locale without Python's UTF-8 mode: ASCII files and stdio."""
    env = {**subprocess_env(), "LC_ALL": "C", "PYTHONUTF8": "0", **extra}
    if "PYTHONIOENCODING" not in extra:
        env.pop("PYTHONIOENCODING", None)
    return env


def stream(encoding: str, errors: str = "strict") -> io.TextIOWrapper:
    """A text stream like a stdout of that encoding; its bytes in `.buffer`."""
    return io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors=errors)


def run_python(code: str, *args: str | bytes, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, timeout=120
    )


# --- files: UTF-8 whatever the locale ----------------------------------------------------


def test_a_truecaser_table_is_written_as_utf8_under_an_ascii_locale(tmp_path):
    """Was: a UnicodeEncodeError in build_truecaser and a 0-byte table left in the cache
    (ASCII), or a Latin-1 file that `load` could not read (the run's closing report)."""
    path = tmp_path / "truecaser.json"
    table = Truecaser("fr", {"etats-unis": "États-Unis", "oeuvre": "Œuvre"})
    code = (
        "import sys; from transformer_jax.data.truecasing import Truecaser; "
        "forms = {'etats-unis': '\\u00c9tats-Unis', 'oeuvre': '\\u0152uvre'}; "
        "Truecaser('fr', forms).save(sys.argv[1])"
    )
    result = run_python(code, str(path), env=ascii_locale_env())
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert "États-Unis" in path.read_bytes().decode("utf-8")
    assert Truecaser.load(path) == table


def test_a_truecaser_table_that_fails_to_save_leaves_the_old_one(tmp_path):
    path = tmp_path / "truecaser.json"
    Truecaser("fr", {"paris": "Paris"}).save(path)
    with pytest.raises(UnicodeEncodeError):
        Truecaser("fr", {"x": "\udcff"}).save(path)  # a lone surrogate: no UTF-8 for it
    assert Truecaser.load(path) == Truecaser("fr", {"paris": "Paris"})
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left


# --- arguments: UTF-8 bytes an ASCII locale escaped are valid ------------------------------


def test_an_argument_in_utf8_is_valid_under_an_ascii_locale():
    """Was: "arguments 1, 2 not valid UTF-8" for "où est le café ?" under LC_ALL=C, whose
    locale escapes every non-ASCII byte (surrogateescape), valid UTF-8 too."""
    assert argument_text("o\udcc3\udcb9 est le caf\udcc3\udca9 ?") == ("où est le café ?", True)
    assert argument_text("caf\udce9") == ("caf\ufffd", False)  # Latin-1 "é": not UTF-8
    assert argument_text("x\ud800") == ("x\ufffd", False)  # a surrogate no byte gave
    code = (
        "import sys; from transformer_jax.evaluation.text_lines import argument_text; "
        "print(ascii([argument_text(a) for a in sys.argv[1:]]))"
    )
    result = run_python(code, "où est le café ?", b"caf\xe9", env=ascii_locale_env())
    assert result.stdout.decode().strip() == ascii(
        [("où est le café ?", True), ("caf\ufffd", False)]
    ), result.stderr.decode()[-2000:]


# --- translate: a stdout that cannot hold the translations is refused first ---------------


class Pieces:
    """A tokenizer's vocabulary as SentencePiece spells it (the protocol's two members)."""

    def __init__(self, pieces: list[str]):
        self.pieces = [*SPECIAL_TOKENS, *pieces]
        self.vocab_size = len(self.pieces)

    def id_to_token(self, index: int) -> str:
        return self.pieces[index]


def test_the_characters_a_model_writes_are_its_target_vocabularys():
    chars = vocabulary_characters(Pieces(["▁où", "▁café", "é", "s", "<s>", "</s>"]))
    assert set(chars) == set("oùcafés")  # no "▁", no special token's "<", "/", ">"
    assert chars["é"] == 2  # in two pieces: named before a rarer character
    assert set(vocabulary_characters(FRENCH)) == set("oùestlcafé?œuvr")


def undecodable(tokenizer, truecaser=None):
    """A translator that has `tokenizer` as its target vocabulary and fails if asked to
    decode: what is refused is refused before decoding."""

    def never(*args, **kwargs):
        raise AssertionError("decoded although the output cannot hold the translations")

    return types.SimpleNamespace(
        tgt_tokenizer=tokenizer, text_truecaser=truecaser, translate_detailed=never
    )


@pytest.mark.parametrize(
    ("encoding", "unfit"), [("ascii", "é"), ("iso8859-1", "œ"), ("cp1252", None)]
)
def test_translate_refuses_a_stdout_that_cannot_hold_the_vocabulary(encoding, unfit):
    """Was: after every line was decoded, `FATAL: 'ascii' codec can't encode character` and
    all the lines lost. Now before the first line is read, naming the encoding, a character
    it lacks and the fixes; an encoding that holds them all passes (cp1252 has "œ")."""
    stdout = stream(encoding)
    if unfit is None:
        check_output(undecodable(FRENCH), stdout)
        return
    with pytest.raises(OutputEncodingError) as refused:
        translate_stream("W", io.StringIO(), stdout, translator=undecodable(FRENCH))
    message = str(refused.value)
    assert f"encoding is {encoding}" in message and f"{unfit!r} (U+{ord(unfit):04X}" in message
    assert all(fix in message for fix in FIXES), message
    assert stdout.buffer.getvalue() == b""


def test_an_ascii_vocabulary_on_an_ascii_stdout_is_not_refused():
    check_output(undecodable(ASCII), stream("ascii"))
    check_output(undecodable(ASCII), stream("ascii", "surrogateescape"))  # the C locale's
    # Natural text writes capitals and learned forms too; TSV output repeats the sources.
    with pytest.raises(OutputEncodingError, match="U\\+00C9"):
        check_output(undecodable(ASCII, Truecaser("en", {"etats": "États"})), stream("ascii"))
    with pytest.raises(OutputEncodingError, match="U\\+00E9"):
        check_output(undecodable(ASCII), stream("ascii"), "data", ["a café ?"])
    # A stream told to escape (PYTHONIOENCODING=ascii:backslashreplace) has chosen that.
    check_output(undecodable(FRENCH), stream("ascii", "backslashreplace"))
    check_output(undecodable(FRENCH), io.StringIO())


def test_a_character_no_check_foresaw_is_named_with_the_fixes():
    """write_lines' own guard (the CTranslate2 engine's TSV sources): the encoding and the
    fixes, not a codec's traceback; nothing half-written."""
    stdout = stream("ascii")
    with pytest.raises(OutputEncodingError) as refused:
        write_lines(["cafe", "café"], None, stdout)
    assert "encoding is ascii" in str(refused.value) and "U+00E9" in str(refused.value)
    stdout.flush()
    assert stdout.buffer.getvalue() == b""


# --- reports: escapes where the terminal cannot show a character --------------------------


def test_printable_escapes_what_the_stream_cannot_encode():
    assert printable("BLEU 1.00 ± 0.20, α 0.6", stream("ascii")) == (
        "BLEU 1.00 \\xb1 0.20, \\u03b1 0.6"
    )
    assert printable("± α", stream("iso8859-1")) == "± \\u03b1"
    assert printable("± α", stream("utf-8")) == "± α"


def test_the_closing_report_prints_on_an_ascii_stdout(monkeypatch, tmp_path):
    """Was: a UnicodeEncodeError at `print(summary_lines)` after the whole run
    (PYTHONIOENCODING=ascii); the report's files hold the text whole."""
    report = {
        "bleu": 1.0, "bleu_ci95": 0.2, "chrf": 10.0, "split": "test", "beam_size": 4,
        "bleu_signature": "s", "chrf_signature": "c", "bleu_by_length": [],
        "num_sentences": 2, "step": 4,
    }  # fmt: skip
    monkeypatch.setattr(report_lib, "evaluate_workdir", lambda *args, **kwargs: report)
    stdout = stream("ascii")
    monkeypatch.setattr(sys, "stdout", stdout)
    assert report_lib.test_report(tmp_path, 2) is report
    stdout.flush()
    assert b"BLEU 1.00 \\xb1 0.20" in stdout.buffer.getvalue()


def test_lenient_stdout_escapes_on_a_non_utf8_stdout_only():
    code = (
        "from transformer_jax.evaluation.stream_encoding import lenient_stdout; "
        "lenient_stdout(); print('BLEU 1 \\u00b1 0.2, \\u03b1')"
    )
    escaped = run_python(code, env={**subprocess_env(), "PYTHONIOENCODING": "ascii"})
    assert escaped.stdout == b"BLEU 1 \\xb1 0.2, \\u03b1\n", escaped.stderr.decode()[-2000:]
    whole = run_python(code, env={**subprocess_env(), "PYTHONIOENCODING": "utf-8"})
    assert whole.stdout == "BLEU 1 ± 0.2, α\n".encode()
    lenient_stdout()  # pytest's captured stdout: harmless


# --- the command, on a trained run ---------------------------------------------------------

needs_corpus = pytest.mark.skipif(
    not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"
)


def translate(workdir: Path, *args: str, env: dict[str, str], **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "experiments.translate", f"--workdir={workdir}", *args],
        cwd=REPO, env=env, capture_output=True, timeout=300, **kwargs,
    )  # fmt: skip


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
@pytest.mark.parametrize(
    "stdin",
    [
        "pipe",
        "file",
    ],
)
def test_translate_refuses_an_ascii_stdout_before_decoding(tiny_workdir, tmp_path, stdin):
    """The tester's report: `echo "Where is the café?" | PYTHONIOENCODING=ascii translate`
    gave `FATAL: 'ascii' codec can't encode character '\\xf9'` after decoding everything.
    The attention plot is drawn after decoding: its absence shows nothing was decoded."""
    source = tmp_path / "in.txt"
    source.write_bytes("Where is the café?\nI am here.\n".encode())
    plot = tmp_path / "attention.png"
    with open(source, "rb") if stdin == "file" else io.BytesIO() as handle:
        result = translate(
            tiny_workdir,
            f"--attention_plot={plot}",
            env={**subprocess_env(), "PYTHONIOENCODING": "ascii"},
            **({"stdin": handle} if stdin == "file" else {"input": source.read_bytes()}),
        )
    stderr = result.stderr.decode("ascii", "backslashreplace")
    assert result.returncode == 2 and "Traceback" not in stderr, stderr[-3000:]
    (fatal,) = [line for line in stderr.splitlines() if line.startswith("FATAL")]
    assert "stdout's encoding is ascii" in fatal and all(fix in fatal for fix in FIXES), fatal
    assert result.stdout == b""
    assert not plot.exists()


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_a_utf8_argument_under_an_ascii_locale_is_translated_without_a_warning(
    tiny_workdir, tmp_path
):
    """`translate "où est le café ?"` under LC_ALL=C warned that valid UTF-8 was not; the
    --output_file is UTF-8 under any locale."""
    out = tmp_path / "out.txt"
    result = translate(
        tiny_workdir, f"--output_file={out}", "où est le café ?", env=ascii_locale_env()
    )
    stderr = result.stderr.decode("ascii", "backslashreplace")
    assert result.returncode == 0 and "not valid UTF-8" not in stderr, stderr[-3000:]
    assert len(out.read_bytes().decode("utf-8").splitlines()) == 1


# --- the sweep: every text file opened as UTF-8 -------------------------------------------

SCANNED = ("transformer_jax", "benchmarks", "configs", "experiments")
_TEXT_CALLS = {"open", "read_text", "write_text", "NamedTemporaryFile", "TemporaryFile"}
_PROCESS_CALLS = {"run", "Popen", "check_output"}
_BINARY_MODULES = {"os", "gzip", "bz2", "lzma"}  # their open() is not text by default


def _mode(call: ast.Call, name: str) -> str:
    """The mode a text-or-binary call opens with, as written ("r" when not given)."""
    keywords = {k.arg: k.value for k in call.keywords}
    if "mode" in keywords:
        node = keywords["mode"]
    else:
        position = 1 if name == "open" and isinstance(call.func, ast.Name) else 0
        node = call.args[position] if len(call.args) > position else None
    if name in ("NamedTemporaryFile", "TemporaryFile") and node is None:
        return "w+b"
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "r"


def unspecified_encodings(path: Path) -> list[str]:
    """`file:line: call` for each text-mode file or subprocess stream without encoding=."""
    found = []
    for call in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        keywords = {k.arg for k in call.keywords}
        if "encoding" in keywords:
            continue
        if name in _PROCESS_CALLS:
            text = keywords & {"text", "universal_newlines", "errors"}
        elif name in _TEXT_CALLS:
            owner = getattr(func, "value", None)
            if isinstance(owner, ast.Name) and owner.id in _BINARY_MODULES:
                continue
            if name == "write_text" and len(call.args) > 1:
                continue  # a metrics writer's write_text(step, tag, text), not Path's
            text = "b" not in _mode(call, name)
        else:
            continue
        if text:
            found.append(f"{path.relative_to(REPO)}:{call.lineno}: {ast.unparse(call)[:80]}")
    return found


def test_every_text_file_is_read_and_written_as_utf8():
    """Text files are UTF-8 by design; without encoding= Python uses the locale's (ASCII,
    Latin-1). Binary opens, and subprocess pipes left as bytes, are fine."""
    found = [
        hit
        for folder in SCANNED
        for path in sorted((REPO / folder).rglob("*.py"))
        for hit in unspecified_encodings(path)
    ]
    assert found == []
