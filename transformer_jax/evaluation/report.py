"""Evaluate a training workdir on a split of its data and write a report beside the checkpoints.

    report = evaluate_workdir("runs/fra_eng")   # writes eval_report.{json,md} (+ curves PNG)
    report = evaluate_workdir("runs/fra_eng", split="validation", num_examples=500)

By default the whole test split is scored, translated by `inference.Translator`. The report
has corpus BLEU and chrF (sacreBLEU, on detokenised text) with their signatures, BLEU by
source length (1-5, 6-10, 11-15, 16+ words, with the pair count of each row), the book's
mean sentence BLEU (k = 2, on the word tokens), the teacher-forced loss, decoding speed,
and sample translations beside their references.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from transformer_jax.data import datasets, load_split_pairs, spread_subset
from transformer_jax.data.batching import eval_batches
from transformer_jax.data.config import eval_rows, resolve_paths
from transformer_jax.data.encoding import encode_pairs
from transformer_jax.evaluation.bleu import (
    BOOTSTRAP_RESAMPLES,
    bleu_by_length,
    book_bleu,
    corpus_scores,
)
from transformer_jax.evaluation.plots import plot_training_curves
from transformer_jax.evaluation.progress import progress_bar
from transformer_jax.evaluation.report_text import format_report, summary_lines
from transformer_jax.evaluation.stream_encoding import printable
from transformer_jax.inference import Translator, load_translator, split_checkpoint
from transformer_jax.inference.run_specs import split_workdirs
from transformer_jax.runtime import commands, compile_log
from transformer_jax.runtime.atomic_files import write_texts_together
from transformer_jax.runtime.messages import first_line
from transformer_jax.training.builder import mapped_eval_step
from transformer_jax.training.metrics import sum_tree
from transformer_jax.training.parallel import DataParallel
from transformer_jax.workdir.checkpoints import (
    CHECKPOINT_DIR,
    METRICS_FILE,
    TENSORBOARD_DIR,
    load_config,
)
from transformer_jax.workdir.directory import write_problem

REPORT_JSON = "eval_report.json"
REPORT_MD = "eval_report.md"
CURVES_PNG = "training_curves.png"
SPEED_SENTENCES = 256  # re-decoded after warm-up (compiled) to time the steady state


class ReportWriteError(OSError):
    """The report was computed but cannot be written (a full disk); the message names the
    directory and the fix, and `report` holds the report, so that a launcher can still show it."""

    def __init__(self, message: str, report: dict[str, Any]):
        super().__init__(message)
        self.report = report


@dataclasses.dataclass
class DecodeRun:
    hypotheses: list[str]
    generated_tokens: int  # tokens produced, <eos> included
    seconds: float


def decode_sentences(
    translator: Translator,
    sentences: Sequence[str],
    progress: Callable[[int, int], None] | None = None,
    **settings: Any,
) -> DecodeRun:
    """`translator.translate_detailed`, timed; `settings` override the translator's."""
    start = time.perf_counter()
    with compile_log.kind("decode"):
        out = translator.translate_detailed(sentences, warn=False, progress=progress, **settings)
    return DecodeRun(out.texts, out.generated_tokens, time.perf_counter() - start)


def teacher_forced_loss(
    translator: Translator, pairs: Sequence[tuple[str, str]], rows: int | None = None
) -> dict[str, float]:
    """Per-token NLL, perplexity and accuracy of the reference translations (as in training).

    Run by the training loop's own eval step (`training.builder.mapped_eval_step`) on batches
    of the validation pass's shape (`eval.loss_batch_size`, default `data.batch_size`, rows of
    the maximum lengths), so after a training run in the same process it is the program the
    loop compiled; `rows` (> 0) sets another (the same loss, other memory). Teacher forcing
    needs the training widths: with `data.long_pairs="skip"` the pairs beyond the limits are
    left out (counted in "loss_pairs_skipped"), as in training.
    """
    config = translator.config
    data = config.data
    encoded = encode_pairs(
        pairs,
        translator.src_tokenizer,
        translator.tgt_tokenizer,
        data.max_src_len,
        data.max_tgt_len,
        data.get("long_pairs", "truncate"),
    )
    parallel = DataParallel.create(config.get("parallelism", "pmap"))
    step = mapped_eval_step(translator.model_config, parallel)
    params = parallel.put_replicated(translator.params)
    devices = parallel.num_local_devices  # a training run's batch divides by its own devices
    # The training shape where it can be; an old run's config has no eval.loss_batch_size.
    rows = eval_rows(data, devices, rows or config.eval.get("loss_batch_size", 0))
    sums = []
    for batch in eval_batches(encoded, global_batch=rows, row_multiple=devices):
        batch.pop("index")
        with compile_log.kind("eval"):
            sums.append(step(params, parallel.put_batch(batch)))
    totals = sum_tree(parallel.get_replicated(sums)) if sums else {}
    weight = max(float(totals.get("weight", 0.0)), 1e-9)
    nll = float(totals.get("nll", 0.0)) / weight
    return {"loss": nll, "perplexity": float(np.exp(min(nll, 50.0))),
            "accuracy": float(totals.get("correct", 0.0)) / weight,
            "loss_pairs_skipped": encoded.num_skipped}  # fmt: skip


def split_names(config: Any) -> list[str]:
    """The split names of a run's dataset (e.g. train, validation, test; fra_eng also full)."""
    return sorted(datasets.split_sizes(config.data))


def check_split(split: str, names: Sequence[str], dataset: str) -> str:
    """`split` if its name (before any TFDS slice, "test[:500]") is one of `names`, else a
    ValueError listing them."""
    if split.partition("[")[0] not in names:
        raise ValueError(
            f"split={split!r} is not a split of {dataset}; choose one of {', '.join(names)} "
            "(a TFDS slice such as test[:500] works too)."
        )
    return split


def evaluate_workdir(
    workdir: str | Path,
    *,
    split: str | None = None,
    step: int | None = None,
    average_last: int = 1,
    beam_size: int | None = None,
    alpha: float | None = None,
    max_decode_len: int | None = None,
    segment_len: int | None = None,
    batch_size: int | None = None,
    loss_batch_size: int | None = None,
    num_examples: int = 0,
    num_samples: int = 10,
    write: bool = True,
    name: str | Callable[[int], str] | None = None,
    report_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    zip_path: str | Path | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Translate the pairs of `split` of a run's data and score them.

    split: a split name of the run's dataset (`split_names`: train, validation, test, ...;
    TFDS slices allowed); default the run's `data.test_split`. By default every pair of the
    split; `num_examples` > 0 keeps n pairs evenly spaced over it (`data.spread_subset`:
    the same pairs every time, with the split's length mix). Decoding settings default to
    the run config's (`inference.decode_settings`: beam size, α, the output budget a·S + b,
    the length above which an input is translated in parts cut at sentence ends);
    `loss_batch_size`: rows of the loss pass's batches (default the run's).
    Writes the run's report, `eval_report.json`, `eval_report.md` and `training_curves.png`
    (from metrics.jsonl), into the workdir unless `write=False`; with a `name` (e.g.
    `report_name(...)`) `<name>.json` and `<name>.md` instead, and no curves, so that an
    evaluation with other settings leaves the run's own report. `name` may be a function of
    the pairs scored (0 = the whole split, also when `num_examples` asks for more than it
    holds), e.g. `functools.partial(report_name, split, **settings)`. `report_dir`: where to
    write instead of the workdir (a run on a read-only disk); checked before anything is
    decoded. `data_dir`, `zip_path`: where this machine keeps the built dataset and the corpus,
    instead of the run's `data.data_dir` and `data.zip_path` (a run copied from another
    machine, or whose data directory became read-only). Returns the report dict, with the
    written files under "files" (not in the JSON).
    `workdir` may name an ensemble (comma-separated workdirs, each `dir` or `dir@STEP`:
    `inference.load_translator`; the report goes to the first). `options`: `DecodeOptions`
    fields (nbest, temperature, top_k, top_p, seed, prefix; None = the default); the best
    hypothesis is scored.
    """
    runs = split_workdirs(workdir)  # a Path is one run, never cut at its commas
    workdir = Path(split_checkpoint(runs[0])[0])
    out_dir = Path(report_dir) if report_dir else workdir
    config = load_config(workdir)  # the split is checked before the parameters are read
    given = {"data_dir": data_dir, "zip_path": zip_path}
    if any(value is not None for value in given.values()):  # this machine's places
        places = ml_collections.ConfigDict({k: str(v or "") for k, v in given.items()})
        resolve_paths(places)  # absolute, ~ expanded, as the run recorded its own
        config.data.update({k: places[k] for k, v in given.items() if v is not None})
    if write:
        check_writable(out_dir)  # before the decoding, not after it
    split = check_split(split or config.data.test_split, split_names(config), config.data.name)
    one = Path(runs[0]) if len(runs) == 1 else workdir  # one run stays one
    translator = load_translator(one, step, average_last=average_last)
    pairs = load_split_pairs(config.data, split)
    total = len(pairs)
    pairs = spread_subset(pairs, num_examples)
    if not pairs:
        raise ValueError(f"the split {split!r} of {config.data.name} is empty.")
    which = (
        f"{len(pairs):,} of {total:,}, evenly spaced" if len(pairs) < total else f"all {total:,}"
    )
    report = {
        "workdir": str(workdir),
        "step": translator.step,
        "averaged_steps": list(translator.averaged_steps),
        "split": f"{split} ({which} pairs)",
        **evaluate_translator(
            translator,
            pairs,
            num_samples=num_samples,
            beam_size=beam_size,
            alpha=alpha,
            max_decode_len=max_decode_len,
            segment_len=segment_len,
            batch_size=batch_size,
            loss_batch_size=loss_batch_size,
            **options,
        ),
    }
    if write:
        if callable(name):
            name = name(len(pairs) if len(pairs) < total else 0)
        report["files"] = [str(path) for path in write_report(report, workdir, out_dir, name)]
    return report


def write_report(
    report: dict[str, Any], workdir: Path, out_dir: Path, name: str | None = None
) -> tuple[Path, Path]:
    """Writes the report's JSON and Markdown into `out_dir` (`report_paths`), and the run's
    training curves unless `name` is given; returns the (JSON, Markdown) paths. The two are
    written beside their places, then both renamed into them: a failed write (a full disk)
    leaves the old pair, never a truncated file or a JSON of one evaluation beside the
    Markdown of another. A write that fails is a `ReportWriteError` naming `out_dir` and the
    fix."""
    json_path, md_path = report_paths(out_dir, name)
    try:
        write_texts_together(
            {
                json_path: json.dumps(report, indent=2, ensure_ascii=False),
                md_path: format_report(report),
            }
        )
        metrics = workdir / METRICS_FILE
        if name is None and metrics.is_file():
            temporary = out_dir / f".tmp.{CURVES_PNG}"  # ends in .png: matplotlib's format
            try:
                plot_training_curves(metrics, temporary)
                os.replace(temporary, out_dir / CURVES_PNG)
                report["curves"] = str(out_dir / CURVES_PNG)
            except ValueError:  # a log without loss/BLEU fields: nothing to draw
                pass
            finally:
                temporary.unlink(missing_ok=True)
    except OSError as error:
        raise ReportWriteError(
            f"the report was computed but cannot be written into {out_dir} "
            f"({first_line(error)}); free space there, or write it elsewhere with report_dir "
            "(evaluate: --report_dir=DIR), and run again.",
            report,
        ) from error
    return json_path, md_path


def check_writable(directory: str | Path) -> None:
    """Raises a ValueError naming `directory` and the fix unless a file can be written there."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        problem = write_problem(directory)
    except OSError as error:
        problem = first_line(error)
    if problem:
        raise ValueError(
            f"cannot write the report into {directory} ({problem}); write it elsewhere with "
            "report_dir (evaluate: --report_dir=DIR)."
        )


def report_paths(workdir: str | Path, name: str | None = None) -> tuple[Path, Path]:
    """(JSON, Markdown) paths of a report: the run's own (`REPORT_JSON`, `REPORT_MD`) when
    `name` is None, else `<name>.json`, `<name>.md`, in the workdir."""
    workdir = Path(workdir)
    if name is None:
        return workdir / REPORT_JSON, workdir / REPORT_MD
    return workdir / f"{name}.json", workdir / f"{name}.md"


def report_name(split: str, num_examples: int = 0, **settings: Any) -> str:
    """The file name (no suffix) of an evaluation's report, from what it scored and how:
    `eval_<split>[_n<pairs>][_<setting>-<value>...]`, settings left at the run's (None, or
    `average_last` 1) unnamed; e.g. `eval_test_n200_beam_size-4` for `--num_examples=200
    --beam_size=4`. Never the run's own `eval_report`."""
    parts = [f"eval_{_file_word(split)}"] + ([f"n{num_examples}"] if num_examples else [])
    for key, value in settings.items():
        if value is None or (key == "average_last" and value == 1):
            continue
        parts.append(f"{key}-{_file_word(value)}")
    return "_".join(parts)


def _file_word(value: Any) -> str:
    """`value` as a piece of a file name: a TFDS slice's `[:500]` and anything else a file
    name should not hold become "-" (test[:500] -> test-500)."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(value)).strip("-")


def evaluate_translator(
    translator: Translator,
    pairs: Sequence[tuple[str, str]],
    *,
    num_samples: int = 10,
    with_loss: bool = True,
    with_speed: bool = True,
    progress: bool | None = None,
    loss_batch_size: int | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Scores of a translator on text pairs (preprocessed as the split stores them).

    sacreBLEU BLEU and chrF on detokenised text with their signatures, BLEU by source length
    (`bleu.LENGTH_BINS` words), the book's mean sentence BLEU (k = 2, on the word tokens),
    optionally the teacher-forced loss (needs `translator.config`; `loss_batch_size` rows a
    batch, default the run's `eval.loss_batch_size`, else `data.batch_size`) and the steady-state
    decoding speed, and samples. `settings` override the translator's decoding settings.
    A decoding longer than a few seconds shows a progress bar on a terminal's stderr
    (`progress`: True always, False never; `evaluation.progress`).
    """
    settings = {**translator.settings, **{k: v for k, v in settings.items() if v is not None}}
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    with progress_bar("Decoding", enabled=progress) as update:
        run = decode_sentences(translator, sources, update, **settings)  # includes compilation
    detok = translator.detokenize
    hyps = [detok(h) for h in run.hypotheses]
    refs = [detok(r) for r in references]
    scores = corpus_scores(hyps, refs, n_bootstrap=BOOTSTRAP_RESAMPLES)
    report = {
        "num_sentences": len(pairs),
        **{k: settings[k] for k in ("beam_size", "alpha", "max_len_a", "max_len_b")},
        "max_decode_len": settings["max_decode_len"] or 0,
        **scores,
        "bleu_by_length": bleu_by_length([detok(s) for s in sources], hyps, refs),
        "book_bleu_k2_mean": float(
            np.mean([book_bleu(h, r, k=2) for h, r in zip(run.hypotheses, references, strict=True)])
        ),
        "decode_seconds_with_compile": run.seconds,
        "generated_tokens": run.generated_tokens,
        "devices": jax.local_device_count(),
        "samples": [
            {"source": s, "reference": r, "translation": h}
            for s, r, h in list(zip(sources, references, run.hypotheses, strict=True))[:num_samples]
        ],
    }
    if with_loss:
        report.update(teacher_forced_loss(translator, pairs, loss_batch_size))
    if with_speed:
        timed = decode_sentences(translator, speed_sources(sources), **settings)  # compiled
        report["decode_tokens_per_sec"] = timed.generated_tokens / max(timed.seconds, 1e-9)
        report["decode_sentences_per_sec"] = min(len(pairs), SPEED_SENTENCES) / max(
            timed.seconds, 1e-9
        )
    return report


def speed_sources(sources: Sequence[str]) -> Sequence[str]:
    """The sources a report decodes a second time, compiled, to time the steady state (its
    first call decodes them all): `report_ahead` compiles for the same two calls."""
    return sources[:SPEED_SENTENCES]


def test_report(workdir: str | Path, num_examples: int) -> dict[str, Any]:
    """What a training launch prints at the end: BLEU, chrF and the length table on
    `num_examples` evenly spaced test pairs (0 = all), written as eval_report.{json,md} too.
    A report scored but not written (`ReportWriteError`: a full disk) is printed, then raised.
    What stdout cannot encode (its "±" and "α" on an ASCII terminal) is printed as backslash
    escapes (`stream_encoding.printable`): the files hold it whole."""
    try:
        # One run: its directory name may hold commas (a sweep point's), never an ensemble.
        report = evaluate_workdir(Path(workdir), num_examples=num_examples)
    except ReportWriteError as error:  # the decoding's result shown, not lost
        print(printable("\n".join(summary_lines(error.report))), flush=True)
        raise
    print(printable("\n".join(summary_lines(report))), flush=True)
    print(printable("\n".join(where_lines(workdir, report))), flush=True)
    return report


def where_lines(workdir: str | Path, report: dict[str, Any]) -> list[str]:
    """Where a finished run's files are, and the command that translates with its model."""
    workdir = Path(workdir)
    lines = [
        "",
        f"Model:       {workdir / CHECKPOINT_DIR / str(report['step'])} "
        f"(with {workdir / 'config.json'} and the tokenizers in {workdir})",
        f"Report:      {workdir / REPORT_MD}",
    ]
    if report.get("curves"):
        lines.append(f"Plots:       {report['curves']}")
    lines += [
        f"TensorBoard: tensorboard --logdir {commands.shell_path(workdir / TENSORBOARD_DIR)}",
        f'Translate:   echo "i lost my keys ." | {commands.command("translate", workdir=workdir)}',
    ]
    return lines
