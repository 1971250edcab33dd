"""The translate and evaluate commands on a tiny workdir trained for a few steps here."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, subprocess_env
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.evaluation import (
    corpus_bleu,
    detokenize_book,
    evaluate_workdir,
    read_sentences,
    translate_workdir,
)
from transformer_jax.evaluation.report import CURVES_PNG, REPORT_JSON, REPORT_MD

needs_corpus = pytest.mark.skipif(
    not SHARED_ZIP.is_file(), reason=f"corpus not found at {SHARED_ZIP}"
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The tiny runlocal model trained 4 steps on 500 pairs (one eval and checkpoint)."""
    from configs import fra_eng
    from transformer_jax.training import train_and_evaluate

    c = fra_eng.get_config("runlocal")
    c.data.train_split = "train[:500]"
    c.data.bucketing = False
    c.data.num_eval_examples = 16
    c.data.batch_size = 16
    c.num_train_steps = 4
    c.log_every_steps = 2
    c.eval_every_steps = c.checkpoint_every_steps = 4
    c.eval.num_bleu_examples = 0  # the commands under test do the decoding
    path = tmp_path_factory.mktemp("tiny_run")
    train_and_evaluate(c, path)
    return path


def test_read_sentences_from_args_file_and_stdin(tmp_path):
    assert read_sentences(["go .", "i lost ."]) == ["go .", "i lost ."]
    f = tmp_path / "in.txt"
    f.write_text("go .\n\ni lost .\n\n")
    assert read_sentences([], str(f)) == ["go .", "", "i lost .", ""]  # one per line
    assert read_sentences([], None, io.StringIO("he's calm .\n")) == ["he's calm ."]
    assert read_sentences([], "-", io.StringIO("a\nb")) == ["a", "b"]


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_translate_workdir_lines_messages_and_attention_plot(workdir, tmp_path):
    plot = tmp_path / "att.png"
    long = " ".join(["go"] * 30)  # 31 tokens with <eos>, beyond the training limit 24
    lines = translate_workdir(workdir, ["Go.", "", "i lost .", long], attention_plot=plot)
    assert lines[0].startswith("go . => ")  # the book's preprocessing was applied
    assert lines[1] == "[1] <empty input: nothing to translate>"
    assert lines[2].startswith("i lost . => ")
    assert lines[3].startswith(f"{long} => ")
    assert lines[3].endswith(
        "(input of 31 tokens, longer than the training limit 24: translated whole)"
    )
    assert len(lines) == 4  # one per sentence: the plot is noted in the log
    assert plot.stat().st_size > 1000
    beam = translate_workdir(workdir, ["go ."], beam_size=3)
    assert beam[0].startswith("go . => ")


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_evaluate_workdir_writes_a_consistent_report(workdir):
    report = evaluate_workdir(workdir, num_examples=24, num_samples=24)
    saved = json.loads((workdir / REPORT_JSON).read_text())
    assert saved["bleu"] == pytest.approx(report["bleu"])
    assert report["step"] == 4 and report["num_sentences"] == 24
    assert "24 of 8,491, evenly spaced" in report["split"]
    assert report["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert sum(row["count"] for row in report["bleu_by_length"]) == 24
    # The corpus BLEU is sacrebleu's on the detokenised samples.
    hyps = [detokenize_book(s["translation"]) for s in report["samples"]]
    refs = [detokenize_book(s["reference"]) for s in report["samples"]]
    assert report["bleu"] == pytest.approx(corpus_bleu(hyps, refs))
    for key in ("chrf", "loss", "perplexity", "decode_tokens_per_sec", "book_bleu_k2_mean"):
        assert report[key] >= 0.0, key
    assert 0 < report["loss"] < 20 and report["decode_tokens_per_sec"] > 0
    markdown = (workdir / REPORT_MD).read_text()
    assert "| BLEU (sacreBLEU, detokenised) |" in markdown
    assert "## BLEU by source length" in markdown and "| 16+ |" in markdown
    assert report["samples"][0]["source"] in markdown
    assert (workdir / CURVES_PNG).stat().st_size > 1000


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_evaluate_scores_the_whole_test_split_by_default(workdir):
    """8,491 pairs; the length table's rows add up to the split (every source has a word)."""
    report = evaluate_workdir(workdir, num_samples=0, write=False)
    assert report["num_sentences"] == 8491 and "all 8,491" in report["split"]
    rows = report["bleu_by_length"]
    assert [r["words"] for r in rows] == ["1-5", "6-10", "11-15", "16+"]
    assert sum(r["count"] for r in rows) == 8491
    assert all(r["count"] > 0 for r in rows)


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_translate_command_reads_stdin(workdir):
    # Every separator str.splitlines() knows, a CRLF line, a blank line, ANSI escapes and a
    # lone "\r": six input lines give six output lines, in order, with no control character.
    lines = [
        "go .",
        "i lost .\r",
        "a\rb\x0cc\x1cd\x85e\u2028f\u2029g",
        "",
        "\x1b[31mhe's\x1b[0m calm .",
        "i\x0bwon !",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.translate", f"--workdir={workdir}"],
        input="\n".join(lines).encode() + b"\n",
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.decode().split("\n")
    assert out[-1] == "" and len(out) == len(lines) + 1, out
    assert out[0].startswith("go . =>") and out[1].startswith("i lost . =>")
    assert out[2].startswith("a b c d e f g =>")
    assert out[3] == "[3] <empty input: nothing to translate>"
    assert out[4].startswith("he's calm . =>") and out[5].startswith("i won ! =>")
    assert all(ch.isprintable() for line in out for ch in line), out


def test_translate_command_without_checkpoint_says_how_to_train(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.translate", f"--workdir={tmp_path}", "go ."],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "experiments.train" in proc.stderr
