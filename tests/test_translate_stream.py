"""translate as a co-process (issue 41, deliverable 2): stdin lines translated as they arrive
(`evaluation.translate_cli.line_chunks`, `translate_stream`), and its edge cases: no input,
a bad --output_file."""

from __future__ import annotations

import io
import os
import selectors
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import REPO, subprocess_env, without_cut_notes
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.evaluation.translate_cli import (
    LINE_PROMPT,
    TERMINAL_PROMPT,
    line_chunks,
    translate_workdir,
)

needs_corpus = pytest.mark.skipif(
    not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"
)


@pytest.fixture(scope="module")
def workdir(tiny_workdir):
    """The tiny runlocal model trained on 500 pairs, shared with the other translate tests
    (tests/conftest.py)."""
    return tiny_workdir


def _chunks(writes: list[bytes], **kwargs) -> list[bytes]:
    """line_chunks of a pipe that holds all of `writes` (then its end) before it is read."""
    read_fd, write_fd = os.pipe()
    try:
        for data in writes:
            os.write(write_fd, data)
        os.close(write_fd)
        write_fd = -1
        return list(line_chunks(read_fd, **kwargs))
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def test_line_chunks_cut_after_line_ends_and_batch_what_is_waiting():
    # All waiting at once: one chunk (a batch); the unterminated last line at the end.
    assert _chunks([b"a\nb\n", b"c\nd"]) == [b"a\nb\nc\n", b"d"]
    assert _chunks([b"a\nb\n", b"c\nd"], one_line=True) == [b"a\n", b"b\n", b"c\n", b"d"]
    assert _chunks([b""]) == [] and _chunks([b"\n\n"], one_line=True) == [b"\n", b"\n"]


def test_line_chunks_yield_each_line_as_it_arrives():
    """A line written while the reader waits comes out before the next is written, and a
    line written in two pieces comes out whole; the prompt is shown before each wait."""
    read_fd, write_fd = os.pipe()
    prompts, got = [], []
    chunks = line_chunks(read_fd, prompt=lambda: prompts.append(len(got)))
    try:
        os.write(write_fd, b"first\n")
        got.append(next(chunks))
        writer = threading.Timer(0.2, os.write, (write_fd, b"ond\n"))
        os.write(write_fd, b"sec")  # half a line: read, kept until its end arrives
        writer.start()
        got.append(next(chunks))
        writer.join()
        os.close(write_fd)
        write_fd = -1
        got.extend(chunks)
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    assert got == [b"first\n", b"second\n"]
    assert prompts == [0, 1, 2]  # before each new line (not mid-line) and before the end


def _read_line(proc: subprocess.Popen, timeout: float) -> bytes:
    """One line of `proc`'s stdout, or a failure after `timeout` seconds (no hang)."""
    fd, line = proc.stdout.fileno(), b""
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not selector.select(left):
            proc.kill()
            pytest.fail(f"no line from translate in {timeout} s (got {line!r})")
        data = os.read(fd, 1)  # one byte at a time: nothing beyond the line is consumed
        if not data:
            pytest.fail(f"translate ended: {proc.stderr.read().decode()[-2000:]}")
        line += data
    return line


def _translate_process(workdir, *flags: str) -> subprocess.Popen:
    """The translate command on `workdir` with pipes for stdin, stdout and stderr."""
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.translate", f"--workdir={workdir}", *flags],
        cwd=REPO,
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
@pytest.mark.parametrize("interactive", [False, True])
def test_translate_answers_each_line_before_the_next_is_written(workdir, interactive):
    sentences = ["go .", "i lost .", "", "he's calm ."]
    want = translate_workdir(workdir, sentences, stderr=io.StringIO())
    proc = _translate_process(workdir, *(["--interactive"] if interactive else []))
    assert answers_line_by_line(proc, sentences, timeout=120) == want


def answers_line_by_line(proc: subprocess.Popen, sentences: list[str], timeout: float) -> list:
    """`proc`'s translation of each sentence, read before the next is written (stdin stays
    open until the last), then its clean end; the process is closed either way."""
    try:
        got = []
        for sentence in sentences:
            proc.stdin.write(f"{sentence}\n".encode())
            proc.stdin.flush()  # stdin stays open: the translation must come back now
            got.append(_read_line(proc, timeout=timeout).decode().rstrip("\n"))
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()[-2000:]
        assert proc.stdout.read() == b""
        return got
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_a_reader_that_leaves_stops_translate_quietly(workdir):
    """`... | translate | head -1`: once the reader is gone, translate stops as Unix tools
    do, with exit code 141 (128 + SIGPIPE) and no FATAL line or traceback."""
    proc = _translate_process(workdir)
    try:
        proc.stdin.write(b"go .\n")
        proc.stdin.flush()
        assert _read_line(proc, timeout=120)
        proc.stdout.close()  # the reader leaves
        try:
            for _ in range(50):
                proc.stdin.write(b"i lost .\n" * 20)
                proc.stdin.flush()
                time.sleep(0.02)
            proc.stdin.close()
        except BrokenPipeError:  # translate has already stopped
            pass
        assert proc.wait(timeout=120) == 141
        errors = proc.stderr.read().decode()
        assert "FATAL" not in errors and "Traceback" not in errors, errors[-2000:]
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_translate_prompts_on_a_terminal(workdir):
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.translate", f"--workdir={workdir}"],
        cwd=REPO,
        env=subprocess_env(),
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    try:
        os.write(master, b"go .\n")
        line = _read_line(proc, timeout=120)
        os.write(master, b"\x04")  # Ctrl-D at the prompt: the end
        assert proc.wait(timeout=60) == 0
        stderr = without_cut_notes(proc.stderr.read().decode())
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
        proc.stdout.close()
        proc.stderr.close()
    assert line.decode().rstrip("\n") == translate_workdir(workdir, ["go ."])[0]
    assert f"{TERMINAL_PROMPT}\n{LINE_PROMPT}{LINE_PROMPT}\n" in stderr, stderr[-2000:]


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_no_input_no_output_and_a_bad_output_file_fails_first(workdir, tmp_path):
    def translate(*args: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "experiments.translate", f"--workdir={workdir}", *args],
            stdin=stdin,
            cwd=REPO,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )

    # `< /dev/null`, and an empty file: zero lines in, zero out, exit 0.
    empty = translate()
    assert (empty.returncode, empty.stdout) == (0, ""), empty.stderr[-2000:]
    assert "FATAL" not in empty.stderr and "USAGE" not in empty.stderr
    assert "Unable to initialize backend" not in empty.stderr  # JAX's probe (launch's filter)
    (tmp_path / "empty.txt").write_bytes(b"")
    out = tmp_path / "out.txt"
    with open(tmp_path / "empty.txt", "rb") as stdin:  # a regular file: read whole
        to_file = translate(f"--output_file={out}", stdin=stdin)
    assert to_file.returncode == 0 and out.read_bytes() == b"", to_file.stderr[-2000:]
    # A bad --output_file is refused before anything is decoded (no attention plot drawn).
    plot = tmp_path / "att.png"
    bad = translate(f"--output_file={tmp_path}/missing/out.txt", f"--attention_plot={plot}", "go .")
    assert bad.returncode == 2 and not plot.exists(), bad.stderr[-2000:]
    assert bad.stderr.strip().splitlines()[-1] == (
        f"FATAL: --output_file={tmp_path}/missing/out.txt: No such file or directory."
    )
    # --interactive reads stdin only.
    both = translate("--interactive", "go .")
    assert both.returncode == 2 and "FATAL: --interactive reads stdin" in both.stderr


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_translate_and_evaluate_show_progress_bars(workdir, monkeypatch, capsys):
    """On a terminal (here forced, with no delay) the decoding shows a bar on stderr; the
    translations are the same as without one."""
    from transformer_jax.evaluation import progress
    from transformer_jax.evaluation.report import evaluate_translator
    from transformer_jax.inference import Translator

    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    sentences = ["go .", "i lost .", "he's calm ."]
    notes = io.StringIO()
    lines = translate_workdir(workdir, sentences, stderr=notes, progress=True)
    assert "Translating" in notes.getvalue() and "3/3" in notes.getvalue(), notes.getvalue()
    assert lines == translate_workdir(workdir, sentences, stderr=io.StringIO(), progress=False)
    translator = Translator.from_workdir(workdir)
    pairs = [("go .", "va !"), ("i lost .", "j'ai perdu .")]
    evaluate_translator(translator, pairs, with_loss=False, with_speed=False, progress=True)
    assert "Decoding" in capsys.readouterr().err
