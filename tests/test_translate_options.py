"""translate and evaluate with decoding options on a tiny trained run (issue 41,
deliverable 3): --nbest's TSV, --prefix, seeded --temperature sampling, an ensemble of
--workdir=a,a@STEP, and one FATAL line for each bad value."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.evaluation.translate_cli import translate_workdir
from transformer_jax.inference import load_translator

needs_corpus = pytest.mark.skipif(
    not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"
)
pytestmark = [pytest.mark.slow, needs_corpus]  # trains for real (a few steps)

LINES = ["go .", "i lost .", "", "he is a good person ."]


@pytest.fixture(scope="module")
def workdir(tiny_workdir):
    """The tiny runlocal model trained 4 steps on 500 pairs (checkpoints at 2 and 4), shared
    with the other translate tests (tests/conftest.py)."""
    return tiny_workdir


def translate(workdir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiments.translate", f"--workdir={workdir}", *args],
        stdin=subprocess.DEVNULL,
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_nbest_tsv_and_prefix_from_the_command_line(workdir):
    out = translate(workdir, "--text=data", "--beam_size=3", "--nbest=2", *LINES)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    # Two hypotheses per line, one for the empty one; line_index from 0, rank from 1.
    assert [(r[0], r[1]) for r in rows] == [
        ("0", "1"),
        ("0", "2"),
        ("1", "1"),
        ("1", "2"),
        ("2", "1"),
        ("3", "1"),
        ("3", "2"),
    ]
    assert rows[4] == ["2", "1", "0.0000", ""]
    for first, second in (rows[0:2], rows[2:4], rows[5:7]):
        assert float(first[2]) >= float(second[2]) and float(first[2]) < 0
        assert first[3] != second[3]
    best = translate_workdir(workdir, LINES, text="data", beam_size=3)
    assert [r[3] for r in rows if r[1] == "1"] == best
    # --prefix: every translation starts with it (the data's form: lowercase, spaced).
    forced = translate(workdir, "--text=data", "--prefix=Je", *LINES[:2])
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert all(line.startswith("je ") for line in forced.stdout.splitlines())
    assert len(forced.stdout.splitlines()) == 2


def test_prefix_of_its_own_output_and_seeded_sampling(workdir):
    greedy = translate_workdir(workdir, LINES, text="data")
    words = greedy[3].split()
    assert len(words) >= 2
    again = translate_workdir(workdir, LINES[3:], text="data", prefix=" ".join(words[:2]))
    assert again == greedy[3:]
    draw = lambda seed: translate_workdir(
        workdir, LINES, text="data", temperature=1.5, seed=seed, nbest=3
    )
    first = draw(1)
    assert draw(1) == first and draw(2) != first
    assert len(first) == 3 * 3 + 1
    # A stream's later chunks (first_number) sample each line as the whole input does.
    sample = lambda lines, first_number=1: translate_workdir(
        workdir, lines, text="data", temperature=1.5, seed=3, first_number=first_number
    )
    whole = sample(LINES)
    assert sample(LINES[:1]) + sample(LINES[1:], first_number=2) == whole


def test_ensembles_of_checkpoints(workdir):
    one = load_translator(str(workdir))
    same = load_translator(f"{workdir},{workdir}")
    assert len(same.ensemble) == 1
    assert same.translate(LINES, beam_size=3) == one.translate(LINES, beam_size=3)
    mixed = load_translator(f"{workdir}@2,{workdir}@4")
    assert (mixed.step, mixed.ensemble[0][1] is not None) == (2, True)
    assert mixed.translate(LINES)  # decodes; its outputs are the mean's, checked in decoding
    with pytest.raises(ValueError, match="give each its checkpoint as workdir@STEP"):
        load_translator(f"{workdir},{workdir}", step=2)


def test_bad_options_are_one_fatal_line(workdir):
    for args, words in (
        (["--beam_size=2", "--nbest=3"], "nbest=3 is more than beam_size=2"),
        (["--temperature=-1"], "temperature must be a number >= 0"),
        (["--top_p=0"], "top_p must be a number in (0, 1]"),
    ):
        out = translate(workdir, *args, "go .")
        assert out.returncode == 2, out.stderr[-2000:]
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith("FATAL:") and words in last, out.stderr[-2000:]


def test_evaluate_scores_the_best_and_takes_ensembles(workdir):
    from transformer_jax.evaluation.report import evaluate_workdir

    def bleu(runs, **options):
        report = evaluate_workdir(runs, num_examples=16, write=False, **options)
        return report["bleu"], [sample["translation"] for sample in report["samples"]]

    plain = bleu(str(workdir), beam_size=2)
    assert bleu(f"{workdir},{workdir}", beam_size=2) == plain  # two copies: the model
    # The best is scored: with n-best as without (a cut input's rank 1 joins its parts' best).
    assert bleu(str(workdir), beam_size=2, nbest=2) == plain
    assert bleu(str(workdir), temperature=1.0, seed=3) != plain


def test_the_server_decodes_an_ensemble_with_the_option_flags_as_defaults(workdir):
    """experiments.serve --workdir=a,a@4 --nbest=2 --beam_size=2: an ensemble of two copies
    of the run, answering as translate_options with those options."""
    pytest.importorskip("fastapi")
    import http.client
    import json
    import re
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "experiments.serve", f"--workdir={workdir},{workdir}@4",
         "--port=0", "--warm_up=false", "--beam_size=2", "--nbest=2", "--text=data"],
        cwd=REPO, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        url = None
        for line in process.stderr:
            found = re.search(r"Serving on http://([^:/]+):(\d+)", line)
            if found:
                url = found.groups()
                break
        assert url, "the server never said where it listens"

        def ask(method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
            connection = http.client.HTTPConnection(url[0], int(url[1]), timeout=300)
            try:
                connection.request(method, path, body)
                response = connection.getresponse()
                return response.status, json.loads(response.read())
            finally:
                connection.close()

        deadline = time.monotonic() + 300
        while ask("GET", "/health")[0] != 200:  # 503 while the model loads
            assert time.monotonic() < deadline, "/health never answered 200"
            time.sleep(0.1)
        _, answer = ask("POST", "/translate", json.dumps({"text": LINES[:2]}).encode())
        want = load_translator(f"{workdir},{workdir}@4").translate_options(
            LINES[:2], {"beam_size": 2, "nbest": 2}
        )
        assert "nbest" in answer, answer
        got = [[h["text"] for h in hyps] for hyps in answer["nbest"]]
        assert got == [list(h.texts) for h in want], answer
        assert answer["translations"] == [h.best for h in want]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_matplotlib_is_imported_only_to_draw_an_attention_plot(workdir, tmp_path):
    """A one-line translate spent ~0.3 s of its ~2.8 s importing matplotlib it never used."""

    def translate_timed(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "experiments.translate",
             f"--workdir={workdir}", *args],
            stdin=subprocess.DEVNULL, cwd=REPO, env=subprocess_env(), capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip

    plain = translate_timed("go .")
    assert plain.returncode == 0 and len(plain.stdout.splitlines()) == 1, plain.stderr[-2000:]
    assert "| transformer_jax.evaluation.translate_cli" in plain.stderr  # the timing is on
    assert "matplotlib" not in plain.stderr
    plot = tmp_path / "attention.png"
    drawn = translate_timed(f"--attention_plot={plot}", "go .")
    assert drawn.returncode == 0, drawn.stderr[-2000:]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "matplotlib" in drawn.stderr
