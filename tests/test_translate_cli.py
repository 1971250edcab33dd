"""The translate and evaluate commands on a tiny workdir trained for a few steps here."""

from __future__ import annotations

import functools
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from configs import fra_eng
from tests.helpers import REPO, subprocess_env, without_cut_notes
from transformer_jax.data.config import SHARED_ZIP
from transformer_jax.data.download import ZipNotFoundError
from transformer_jax.data.text_form import clean_text
from transformer_jax.data.truecasing import TRUECASER_FILE, Truecaser
from transformer_jax.evaluation import (
    bleu_interval,
    corpus_bleu,
    detokenize_book,
    evaluate_workdir,
    read_sentences,
    translate_workdir,
)
from transformer_jax.evaluation.report import (
    CURVES_PNG,
    REPORT_JSON,
    REPORT_MD,
    report_name,
    report_paths,
)
from transformer_jax.evaluation.text_lines import decode_lines

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
def test_translate_workdir_plain_tsv_notes_and_attention_plot(workdir, tmp_path):
    from transformer_jax.inference import Translator

    plot, notes = tmp_path / "att.png", io.StringIO()
    long = " ".join(["go"] * 30)  # 31 tokens with <eos>, beyond the training limit 24
    inputs = ["Go.", "", "i\tlost .", long]
    tsv = translate_workdir(workdir, inputs, output_format="tsv", attention_plot=plot, stderr=notes)
    assert len(tsv) == 4  # one per sentence: the plot and the notes are elsewhere
    sources, translations = zip(*(line.split("\t") for line in tsv), strict=True)
    assert sources == ("Go.", "", "i lost .", long)  # the input, control characters out
    assert translations[1] == ""  # an empty input: an empty translation, no message
    # Plain output is the translation column, the book's preprocessing applied first, as
    # natural text (the run's truecaser, saved with its tokenizers) or as the model wrote it.
    translator = Translator.from_workdir(workdir)
    saved = workdir / "tokenizer" / TRUECASER_FILE
    assert translator.truecaser == Truecaser.load(saved) and translator.truecaser.forms
    sentences = ["go .", "", "i lost .", long]
    want = [clean_text(w).strip() for w in translator.translate(sentences, warn=False)]
    natural = [translator.natural(w, clean_text(s)) for w, s in zip(want, inputs, strict=True)]
    plain = translate_workdir(workdir, inputs, translator=translator, stderr=io.StringIO())
    assert plain == list(translations) == natural
    data = translate_workdir(workdir, inputs, text="data", translator=translator)
    assert data == want
    with pytest.raises(ValueError, match="--text='lower'; choose one of natural, data"):
        translate_workdir(workdir, inputs, text="lower", translator=translator)
    assert without_cut_notes(notes.getvalue()) == (
        "note: sentence 4 has 31 tokens, more than the longest the model was trained on (24): "
        "translated whole.\n"
    )
    assert plot.stat().st_size > 1000
    beam = translate_workdir(workdir, ["go ."], beam_size=3, translator=translator)
    assert beam == [translator.translate(["go ."], beam_size=3)[0].strip()]


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_translate_workdir_notes_words_read_as_unk(workdir):
    notes = io.StringIO()
    lines = translate_workdir(workdir, ["go .", "go ❤ 😀 ❤ .", "go ."], stderr=notes)
    assert len(lines) == 3  # translated all the same, one line each
    assert without_cut_notes(notes.getvalue()) == (
        "note: sentence 2 has '❤', '😀', which the model's vocabulary does not cover: read "
        "as <unk>, so the translation may miss or invent them.\n"
    )


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
    assert report["bleu_ci95"] == pytest.approx(bleu_interval(hyps, refs))
    for key in ("chrf", "loss", "perplexity", "decode_tokens_per_sec", "book_bleu_k2_mean"):
        assert report[key] >= 0.0, key
    assert 0 < report["loss"] < 20 and report["decode_tokens_per_sec"] > 0
    markdown = (workdir / REPORT_MD).read_text()
    assert f"| BLEU (sacreBLEU, detokenised) | {report['bleu']:.2f} ± " in markdown
    assert "## BLEU by source length" in markdown and "| 16+ |" in markdown
    assert report["samples"][0]["source"] in markdown
    assert (workdir / CURVES_PNG).stat().st_size > 1000


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_evaluate_scores_the_whole_test_split_by_default(workdir):
    """8,491 pairs; the length table's rows add up to the split (every source has a word).
    Outputs of 3 tokens at most: the 4-step model writes to its budget otherwise, and the
    split's decoding, not what this checks, took most of the suite's longest test."""
    report = evaluate_workdir(workdir, num_samples=0, write=False, max_decode_len=3)
    assert report["num_sentences"] == 8491 and "all 8,491" in report["split"]
    rows = report["bleu_by_length"]
    assert [r["words"] for r in rows] == ["1-5", "6-10", "11-15", "16+"]
    assert sum(r["count"] for r in rows) == 8491
    assert all(r["count"] > 0 for r in rows)


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_evaluate_takes_the_data_split_names(workdir):
    report = evaluate_workdir(workdir, split="validation", num_examples=8, num_samples=8,
                              write=False)  # fmt: skip
    assert report["split"].startswith("validation (8 of ") and report["num_sentences"] == 8
    sliced = evaluate_workdir(workdir, split="test[:8]", num_samples=0, write=False)
    assert sliced["num_sentences"] == 8 and sliced["split"] == "test[:8] (all 8 pairs)"
    with pytest.raises(ValueError, match="'eval' is not a split of fra_eng; choose one of "
                       "full, test, train, validation"):  # fmt: skip
        evaluate_workdir(workdir, split="eval", write=False)


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_a_report_that_cannot_be_written_fails_before_decoding(workdir, tmp_path, monkeypatch):
    """A run on a read-only disk (here: a report_dir under a file, which cannot be created)
    is refused before any decoding; another report_dir takes the report, not the workdir."""
    from transformer_jax.evaluation import report as report_lib

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded before checking where the report goes")

    with monkeypatch.context() as patch:
        patch.setattr(report_lib, "evaluate_translator", no_decoding)
        blocked = tmp_path / "a_file"
        blocked.write_text("")
        with pytest.raises(ValueError, match=r"cannot write the report into .*--report_dir=DIR"):
            evaluate_workdir(workdir, num_examples=4, name="x", report_dir=blocked / "reports")
    before = sorted(p.name for p in workdir.iterdir())
    evaluate_workdir(workdir, num_examples=4, num_samples=0, name="x", report_dir=tmp_path / "r")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["x.json", "x.md"]
    assert sorted(p.name for p in workdir.iterdir()) == before


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_a_report_is_named_after_the_pairs_it_scored(workdir, tmp_path):
    """Asking for more pairs than the split holds scores the whole split, and the report is
    the whole split's (it was named _n50); its JSON and Markdown are written together."""
    name = functools.partial(report_name, "test[:8]", beam_size=2)
    whole = evaluate_workdir(workdir, split="test[:8]", num_examples=50, num_samples=0,
                             beam_size=2, name=name, report_dir=tmp_path)  # fmt: skip
    part = evaluate_workdir(workdir, split="test[:8]", num_examples=4, num_samples=0,
                            beam_size=2, name=name, report_dir=tmp_path)  # fmt: skip
    assert whole["files"] == [str(p) for p in report_paths(tmp_path, "eval_test-8_beam_size-2")]
    assert part["files"] == [str(p) for p in report_paths(tmp_path, "eval_test-8_n4_beam_size-2")]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "eval_test-8_beam_size-2.json", "eval_test-8_beam_size-2.md",
        "eval_test-8_n4_beam_size-2.json", "eval_test-8_n4_beam_size-2.md",
    ]  # fmt: skip
    assert json.loads(Path(whole["files"][0]).read_text())["num_sentences"] == 8


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_evaluate_reads_the_data_where_this_machine_keeps_it(workdir, tmp_path):
    """A run copied from another machine names its data directory and corpus there: the
    error names the flags that say where they are here, and --data_dir reads this machine's
    build."""
    moved = tmp_path / "copied_run"
    shutil.copytree(workdir, moved)
    config = json.loads((moved / "config.json").read_text())
    here = config["data"]["data_dir"]
    config["data"].update(data_dir=str(tmp_path / "alice" / "tfds"), url="",
                          zip_path=str(tmp_path / "alice" / "fra-eng.zip"))  # fmt: skip
    (moved / "config.json").write_text(json.dumps(config))
    with pytest.raises(ZipNotFoundError, match=r"--config.data.zip_path"):
        evaluate_workdir(moved, split="test[:8]", write=False)
    report = evaluate_workdir(moved, split="test[:8]", num_samples=0, write=False, data_dir=here)
    assert report["num_sentences"] == 8
    result = subprocess.run(
        [sys.executable, "-m", "experiments.evaluate", f"--workdir={moved}", "--split=test[:8]",
         f"--report_dir={tmp_path / 'reports'}"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and "--zip_path" in result.stderr, result.stderr[-2000:]
    assert "--config.data" not in result.stderr


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_translate_command_reads_stdin(workdir, tmp_path):
    # Every separator str.splitlines() knows, a CRLF line, a blank line, ANSI escapes, a
    # lone "\r" and a line of invalid UTF-8: seven input lines give seven output lines, in
    # order, with no control character; the bad line is named on stderr and translated.
    lines = [
        b"go .",
        b"i lost .\r",
        "a\rb\x0cc\x1cd\x85e\u2028f\u2029g".encode(),
        b"",
        b"\x1b[31mhe's\x1b[0m calm .",
        b"caf\xe9 \xff .",  # Latin-1, not UTF-8
        b"i\x0bwon !",
    ]
    output = tmp_path / "out.tsv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.translate",
            f"--workdir={workdir}",
            "--format=tsv",
            "--text=data",
            f"--output_file={output}",
        ],
        input=b"\n".join(lines) + b"\n",
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == b""  # everything went to --output_file
    assert "stdin: line 6 not valid UTF-8" in proc.stderr.decode()
    out = output.read_text(encoding="utf-8").split("\n")
    assert out[-1] == "" and len(out) == len(lines) + 1, out
    sources = [line.split("\t")[0] for line in out[:-1]]
    assert sources == [
        "go .", "i lost .", "a b c d e f g", "", "he's calm .", "caf\ufffd \ufffd .", "i won !"
    ]  # fmt: skip
    assert out[3] == "\t"  # an empty input: an empty source and translation
    assert all(ch.isprintable() or ch == "\t" for line in out for ch in line), out
    # --text=data: the model's own form, as translate_workdir gives it.
    decoded, _ = decode_lines(b"\n".join(lines) + b"\n")
    want = translate_workdir(workdir, decoded, text="data", stderr=io.StringIO())
    assert [line.split("\t")[1] for line in out[:-1]] == want


@pytest.mark.slow  # trains for real (a few steps)
@needs_corpus
def test_evaluate_command_splits_decoding_over_cpu_devices(workdir, tmp_path):
    """--cpu_devices=3: the report says 3 devices and scores exactly as one device does."""
    run = tmp_path / "run"
    shutil.copytree(workdir, run)
    own = {REPORT_JSON: b'{"the run": "own report"}', REPORT_MD: b"the run's own report"}
    for file, data in own.items():
        (run / file).write_bytes(data)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.evaluate",
            f"--workdir={run}",
            "--num_examples=31",  # not a multiple of 3: the batch gets padding rows
            "--cpu_devices=3",
        ],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Its own report, named after what it scored and how; the run's own report stays.
    name = "eval_test_n31"
    assert f"Report written to {run / name}.md and {run / name}.json" in proc.stderr
    assert {f: (run / f).read_bytes() for f in own} == own
    assert (run / f"{name}.md").read_text() in proc.stdout
    split = json.loads((run / f"{name}.json").read_text())
    one = evaluate_workdir(workdir, num_examples=31, num_samples=31, write=False)
    assert split["devices"] == 3 and one["devices"] != 3
    assert [s["translation"] for s in split["samples"]] == [
        s["translation"] for s in one["samples"][: len(split["samples"])]
    ]
    assert split["bleu"] == pytest.approx(one["bleu"]) and split["num_sentences"] == 31


def test_report_names_say_what_was_scored_and_how():
    assert report_name("test") == "eval_test"
    assert report_name("test", 200, step=None, average_last=1, beam_size=None) == "eval_test_n200"
    assert (
        report_name("test[:500]", 0, step=3000, average_last=3, beam_size=4, alpha=1.0)
        == "eval_test-500_step-3000_average_last-3_beam_size-4_alpha-1.0"
    )
    assert report_paths("run", None) == (Path("run/eval_report.json"), Path("run/eval_report.md"))
    assert report_paths("run", "eval_test")[1] == Path("run/eval_test.md")


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_commands_apply_the_runs_process_settings(tmp_path, command):
    """translate and evaluate call `runtime.configure_process` with the run's config (as
    training does): a bad setting there stops them with one FATAL line naming it."""
    config = fra_eng.get_config("runlocal")
    config.threefry_lowering = "bogus"
    (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
    sentences = ["go ."] if command == "translate" else []
    proc = subprocess.run(
        [sys.executable, "-m", f"experiments.{command}", f"--workdir={tmp_path}", *sentences],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("FATAL: threefry_lowering='bogus'")


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
