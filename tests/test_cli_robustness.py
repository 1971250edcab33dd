"""translate and its CTranslate2 engine on inputs a user found mishandled: an output file
that is the input, an output file a failure would have emptied, a stdin stream with the
CTranslate2 engine, a top_k over the vocabulary, a byte-order mark, bytes that are not UTF-8
in an argument, and prefixes the model cannot write as given (`evaluation.translate_cli`,
`export.ct2_translate`, `experiments.translate`). A tiny random model, exported to
CTranslate2 for the command's tests: no training."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.data.vocab import SPECIAL_TOKENS
from transformer_jax.data.word_tokenizer import WordTokenizer
from transformer_jax.evaluation.output_file import check_output_not_input, open_output
from transformer_jax.evaluation.text_lines import argument_text, decode_lines
from transformer_jax.evaluation.translate_cli import read_sentences, translate_workdir
from transformer_jax.inference.notes import prefix_notes

ctranslate2 = pytest.importorskip("ctranslate2")

WORDS = WordTokenizer([*SPECIAL_TOKENS, *(f"w{i}" for i in range(36))])  # 40 ids


def random_translator(**settings):
    from transformer_jax.inference import Translator
    from transformer_jax.testing import random_params, tiny_config

    cfg = tiny_config(WORDS.vocab_size, WORDS.vocab_size)
    return Translator.from_params(cfg, random_params(cfg, seed=1), WORDS, WORDS, **settings)


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """A CTranslate2 export of the random model (the command's --model_dir)."""
    from transformer_jax.export import convert

    return convert(random_translator(), tmp_path_factory.mktemp("robust") / "ct2")


def translate(export, *args: str, stdin=subprocess.DEVNULL, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "experiments.translate", "--engine=ctranslate2",
         f"--model_dir={export}", "--beam_size=1", *args],
        cwd=REPO, env=subprocess_env(), stdin=stdin, capture_output=True, text=True,
        timeout=120, **kwargs,
    )  # fmt: skip


def fatal(result) -> str:
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("FATAL")]
    return line


# --- bug 1: the output is the input; a failure must not empty the output ---------------------


def test_an_output_that_is_the_input_is_refused(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("w1 w2\n")
    os.link(source, tmp_path / "hard.txt")
    (tmp_path / "soft.txt").symlink_to(source)
    for output in (source, tmp_path / "hard.txt", tmp_path / "soft.txt"):
        with pytest.raises(ValueError, match=f"--output_file={output} is the input"):
            check_output_not_input(output, source, None)
        with open(source) as stdin, pytest.raises(ValueError, match="stdin reads it"):
            check_output_not_input(output, "-", stdin)
    check_output_not_input(tmp_path / "other.txt", source, None)  # not there yet
    (tmp_path / "other.txt").write_text("")
    check_output_not_input(tmp_path / "other.txt", source, None)  # another file
    with open(source) as stdin:
        check_output_not_input("/dev/null", None, stdin)  # not a regular file: not compared


def test_the_command_refuses_an_output_that_is_its_input(export, tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("w1 w2\nw3\n")
    same = translate(export, f"--input_file={path}", f"--output_file={path}")
    assert fatal(same).startswith(f"FATAL: --output_file={path} is the input (--input_file=")
    with open(path) as stdin:
        redirected = translate(export, f"--output_file={path}", stdin=stdin)
    assert "is the input (stdin reads it" in fatal(redirected)
    assert path.read_text() == "w1 w2\nw3\n"


def test_open_output_replaces_the_file_only_once_written(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    path.chmod(0o640)
    with pytest.raises(RuntimeError), open_output(path) as output:
        output.write("half\n")
        raise RuntimeError("decoding failed")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]
    with open_output(path) as output:
        output.write("new\n")
        assert path.read_text() == "old\n"  # not yet: written beside it
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["out.txt"]
    assert path.stat().st_mode & 0o777 == 0o640  # the file's mode kept
    with open_output(path, stream=True) as output:  # a stream: in place, each line as flushed
        output.write("line\n")
        output.flush()
        assert path.read_text() == "line\n"


def test_a_failure_after_start_up_leaves_the_output_file_as_it_was(export, tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    failed = translate(export, f"--output_file={path}", "--temperature=-1", "w1")
    assert "temperature must be" in fatal(failed)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]
    done = translate(export, f"--output_file={path}", "w1", "w2")
    assert done.returncode == 0 and len(path.read_text().splitlines()) == 2, done.stderr


@pytest.fixture(scope="module")
def workdir(tiny_workdir):
    """The tiny runlocal model trained on 500 pairs, shared with the other translate tests
    (tests/conftest.py)."""
    return tiny_workdir


@pytest.mark.slow  # trains for real (a few steps)
@pytest.mark.skipif(not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}")
def test_the_jax_engine_keeps_the_output_file_when_it_fails_after_start_up(workdir, tmp_path):
    """The JAX engine opened --output_file before decoding (a bad path fails first): a
    failure after that (here the attention plot, which needs a non-empty sentence) left it
    empty."""

    def translate_jax(*args: str, stdin=subprocess.DEVNULL):
        return subprocess.run(
            [sys.executable, "-m", "experiments.translate", f"--workdir={workdir}", *args],
            cwd=REPO, env=subprocess_env(), stdin=stdin, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip

    path = tmp_path / "out.txt"
    path.write_text("old\n")
    plot = tmp_path / "attention.png"
    failed = translate_jax(f"--output_file={path}", f"--attention_plot={plot}", "")
    assert "no non-empty sentence to draw attention for" in fatal(failed)
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]
    with open(path) as stdin:
        same = translate_jax(f"--output_file={path}", stdin=stdin)
    assert "is the input (stdin reads it" in fatal(same) and path.read_text() == "old\n"


# --- bug 2: the CTranslate2 engine streams stdin ------------------------------------------


STREAMED = ["w1 w2 w3", "w4", "", "w5 w6"]


@pytest.fixture(scope="module")
def streamed_want(export, tmp_path_factory):
    """The command's output for STREAMED read from a file: what the stream must answer (one
    launch for both stream tests)."""
    path = tmp_path_factory.mktemp("streamed") / "in.txt"
    path.write_text("".join(f"{s}\n" for s in STREAMED))
    return translate(export, f"--input_file={path}").stdout.splitlines()


@pytest.mark.parametrize("interactive", [False, True])
def test_the_ctranslate2_engine_answers_each_line_before_the_next(
    export, streamed_want, interactive
):
    from tests.test_translate_stream import answers_line_by_line

    sentences, want = STREAMED, streamed_want
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.translate", "--engine=ctranslate2",
         f"--model_dir={export}", "--beam_size=1", *(["--interactive"] if interactive else [])],
        cwd=REPO, env=subprocess_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert answers_line_by_line(proc, sentences, timeout=60) == want and len(want) == 4


def test_jax_only_flags_name_their_own_reason(export):
    plot = fatal(translate(export, "--attention_plot=a.png", "w1"))
    assert plot == (
        "FATAL: --attention_plot applies to --engine=jax only (the CTranslate2 engine does not "
        "return attention weights)."
    )
    assert "--step applies to --engine=jax only (a CTranslate2 export holds one set" in fatal(
        translate(export, "--step=1", "w1")
    )


# --- bug 3: top_k over the vocabulary -----------------------------------------------------


def test_a_top_k_over_the_vocabulary_is_every_token_in_both_engines(export):
    from transformer_jax.export.ct2_translate import translate_detailed

    sampling = dict(temperature=1.0, seed=3, nbest=2)
    over = translate_detailed(export, ["w1 w2", "w3"], top_k=100_000, **sampling)
    every = translate_detailed(export, ["w1 w2", "w3"], top_k=0, **sampling)
    assert over.hypotheses == every.hypotheses
    model = random_translator()
    assert model.translate(["w1 w2"], top_k=100_000, **sampling) == model.translate(
        ["w1 w2"], top_k=0, **sampling
    )


# --- bug 6: a byte-order mark; bug 4: bytes that are not UTF-8 in an argument -------------


def test_a_byte_order_mark_starts_no_line(export, tmp_path):
    assert decode_lines(b"\xef\xbb\xbfw1\nw2\n") == (["w1", "w2"], [])
    assert decode_lines(b"\xef\xbb\xbfw1\n", start=False) == (["\ufeffw1"], [])  # mid-stream
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfw1 w2\nw3\n")
    assert read_sentences([], str(path)) == ["w1 w2", "w3"]
    tsv = translate(export, f"--input_file={path}", "--format=tsv")
    assert tsv.returncode == 0 and tsv.stdout.startswith("w1 w2\t"), tsv.stderr
    with open(path, "rb") as stdin:  # a stream too
        piped = subprocess.run(
            [sys.executable, "-m", "experiments.translate", "--engine=ctranslate2",
             f"--model_dir={export}", "--format=tsv", "--interactive"],
            cwd=REPO, env=subprocess_env(), stdin=stdin, capture_output=True, timeout=120,
        )  # fmt: skip
    assert piped.stdout.decode().startswith("w1 w2\t"), piped.stderr.decode()[-2000:]


def test_an_argument_that_is_not_utf8_is_read_as_a_files_line(export):
    assert argument_text("w1 \udcff") == ("w1 \ufffd", False)  # surrogateescape'd byte 0xff
    # é's two bytes, escaped by an ASCII locale (LC_ALL=C): valid UTF-8, no warning
    assert argument_text("a\udcc3\udca9") == ("a\u00e9", True)
    assert argument_text("w1") == ("w1", True)
    stderr = io.StringIO()
    assert read_sentences(["w1", "w2 \udcff"], stderr=stderr) == ["w1", "w2 \ufffd"]
    assert "argument 2 not valid UTF-8" in stderr.getvalue()
    result = subprocess.run(
        [sys.executable, "-m", "experiments.translate", "--engine=ctranslate2",
         f"--model_dir={export}", b"w1 \xff w2", b"--prefix=w3 \xfe"],
        cwd=REPO, env=subprocess_env(), capture_output=True, timeout=120,
    )  # fmt: skip
    stderr = result.stderr.decode()
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 1, stderr[-2000:]
    assert "argument 1 not valid UTF-8" in stderr and "--prefix not valid UTF-8" in stderr


# --- bug 7: notes on a prefix -------------------------------------------------------------


def test_prefix_notes_name_unknown_words_special_tokens_and_a_cut():
    notes = prefix_notes("w1 zz <eos> yy w2", WORDS, max_decode_len=None, position_limit=None)
    assert notes == [
        "note: the prefix has 'zz', 'yy', which the model's target vocabulary does not cover: "
        "forced as <unk>, which the translations show in their place.",
        "note: the prefix holds the special token <eos>, forced as a token of the "
        "translation: drop it from --prefix.",
    ]
    (cut,) = prefix_notes("w1 w2 w3 w4", WORDS, max_decode_len=3, position_limit=32)
    assert "has 4 tokens, more than a translation may hold (--max_decode_len=3)" in cut
    (cut,) = prefix_notes("w1 w2 w3", WORDS, max_decode_len=None, position_limit=2)
    assert "(the model's position table, 2 rows)" in cut
    assert prefix_notes("w1 w2", WORDS, max_decode_len=2, position_limit=None) == []


def test_both_engines_note_a_prefix_once(export):
    stderr = io.StringIO()
    model = random_translator()
    prefix = "w1 zz w2 w3 w4 w5"
    lines = translate_workdir(
        None, ["w1", "w2"], translator=model, prefix=prefix, max_decode_len=4, stderr=stderr
    )
    assert all(line.startswith("w1 <unk> w2 w3") for line in lines), lines
    notes = [n for n in stderr.getvalue().splitlines() if "the prefix" in n]
    assert len(notes) == 2 and "'zz'" in notes[0] and "cut to its first 4 tokens" in notes[1]
    # Each line also says it was cut (the JAX engine knows which outputs ran out of budget).
    assert stderr.getvalue().count("translation was cut at 4 tokens") == 2
    assert translate_workdir(
        None, ["w1"], translator=model, prefix=prefix, first_number=3, stderr=io.StringIO()
    )  # a stream's later chunk: the notes came with the first line's
    result = translate(export, f"--prefix={prefix}", "--max_decode_len=4", "w1", "w2")
    assert result.returncode == 0, result.stderr
    assert [n for n in result.stderr.splitlines() if n.startswith("note: the prefix")] == notes


def test_the_ctranslate2_engine_gives_a_long_prefix_room_as_the_jax_engine(export):
    from transformer_jax.export.ct2_translate import translate_detailed

    prefix = " ".join(f"w{i % 30 + 1}" for i in range(40))  # 40 tokens: over a·8 + b = 26
    ours = random_translator().translate(["w1"], prefix=prefix, beam_size=1)
    theirs = translate_detailed(export, ["w1"], prefix=prefix, beam_size=1).texts
    assert ours[0].startswith(prefix) and theirs[0].startswith(prefix)


def test_a_translation_cut_by_its_budget_is_noted_on_stderr():
    """With room for one token, which cannot be <eos> (min_len 1), every non-empty line's
    output is cut, and says so, numbered as the input's lines (empty ones translate empty)."""
    stderr = io.StringIO()
    model = random_translator()
    lines = translate_workdir(
        "", ["w1 w2", "", "w3"], translator=model, stderr=stderr, max_decode_len=1
    )
    assert len(lines) == 3 and lines[1] == "" and lines[0] and lines[2]
    notes = [n for n in stderr.getvalue().splitlines() if "was cut at 1 tokens" in n]
    assert [n.split("'")[0] for n in notes] == ["note: sentence 1", "note: sentence 3"]
