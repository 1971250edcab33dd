"""Evaluate a training workdir on its test split and write a report beside the checkpoints.

    report = evaluate_workdir("runs/fra_eng")   # writes eval_report.{json,md} (+ curves PNG)

The report has corpus BLEU and chrF (sacrebleu, on detokenised text), the book's mean
sentence BLEU (k = 2, on the word tokens), the teacher-forced loss, decoding speed, and sample
translations beside their references.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_jax.data.vocab import EOS_ID, PAD_ID
from transformer_jax.decoding.translate import decode_ids, encode_sources
from transformer_jax.evaluation.bleu import book_bleu, corpus_bleu, corpus_chrf, detokenize_book
from transformer_jax.nn import ModelConfig, Transformer

REPORT_JSON = "eval_report.json"
REPORT_MD = "eval_report.md"
CURVES_PNG = "training_curves.png"
SPEED_SENTENCES = 256  # re-decoded after warm-up (compiled) to time the steady state


@dataclasses.dataclass
class DecodeRun:
    hypotheses: list[str]
    generated_tokens: int  # tokens produced, <eos> included
    seconds: float


def decode_sentences(bundle: Any, sentences: Sequence[str], **decode_kw: Any) -> DecodeRun:
    """Translate with `decode_ids`, counting generated tokens and wall time."""
    cfg, data = bundle.model_config, bundle.config.data
    limit = min(data.max_src_len or cfg.max_len, cfg.max_len)
    ids = encode_sources(bundle.src_tokenizer, sentences, limit).ids
    todo = [i for i, x in enumerate(ids) if x]
    start = time.perf_counter()
    out = decode_ids(cfg, bundle.params, [ids[i] for i in todo], **decode_kw)
    seconds = time.perf_counter() - start
    hypotheses = [""] * len(sentences)
    tokens = 0
    for i, row in zip(todo, out, strict=True):
        ends = np.flatnonzero(row == EOS_ID)
        tokens += int(ends[0]) + 1 if ends.size else int((row != PAD_ID).sum())
        hypotheses[i] = bundle.tgt_tokenizer.decode([int(t) for t in row])
    return DecodeRun(hypotheses, tokens, seconds)


@functools.partial(jax.jit, static_argnames=("config",))
def _loss_sums(config: ModelConfig, params: Any, batch: dict[str, jnp.ndarray]) -> dict:
    """Sums of token NLL, correct arg-max and weight over a batch (no label smoothing)."""
    from transformer_jax.training.losses import weighted_loss_sums

    logits = Transformer(config).apply(
        {"params": params}, batch["src"], batch["src_len"], batch["tgt_in"]
    )  # (B, T, V)
    return weighted_loss_sums(logits, batch["tgt_out"], batch["tgt_weight"], 0.0)


def teacher_forced_loss(
    bundle: Any, pairs: Sequence[tuple[str, str]], batch_size: int = 64
) -> dict[str, float]:
    """Per-token NLL, perplexity and accuracy of the reference translations (as in training)."""
    from transformer_jax.data.encoding import encode_pairs, make_batch

    data = bundle.config.data
    encoded = encode_pairs(
        pairs, bundle.src_tokenizer, bundle.tgt_tokenizer, data.max_src_len, data.max_tgt_len
    )
    totals = {"nll": 0.0, "correct": 0.0, "weight": 0.0}
    for start in range(0, len(pairs), batch_size):
        idx = np.arange(start, min(start + batch_size, len(pairs)))
        real = len(idx)
        idx = np.concatenate([idx, np.full(batch_size - real, idx[0])])  # one fixed shape
        batch = make_batch(encoded, idx, data.max_src_len, data.max_tgt_len)
        batch["tgt_weight"] = batch["tgt_weight"] * (np.arange(batch_size) < real)[:, None]
        keep = {k: batch[k] for k in ("src", "src_len", "tgt_in", "tgt_out", "tgt_weight")}
        sums = jax.device_get(_loss_sums(bundle.model_config, bundle.params, keep))
        for key in totals:
            totals[key] += float(sums[key])
    weight = max(totals["weight"], 1e-9)
    nll = totals["nll"] / weight
    return {"loss": nll, "perplexity": float(np.exp(min(nll, 50.0))),
            "accuracy": totals["correct"] / weight}  # fmt: skip


def book_style(config: Any) -> bool:
    """Whether the split's text went through the book's preprocessing (spaced punctuation)."""
    from transformer_jax.data.config import FRA_ENG

    return config.data.name == FRA_ENG or bool(config.data.book_preprocessing)


def evaluate_workdir(
    workdir: str | Path,
    *,
    split: str = "test",
    step: int | None = None,
    beam_size: int | None = None,
    alpha: float = 0.6,
    max_decode_len: int | None = None,
    batch_size: int | None = None,
    num_examples: int = 0,
    num_samples: int = 10,
    write: bool = True,
) -> dict[str, Any]:
    """Translate the `split` ("test" or "eval") pairs of a run's data and score them.

    Defaults come from the run config (eval.beam_size, eval.max_decode_len or
    data.max_tgt_len, eval.decode_batch_size). `num_examples` > 0 keeps the first n pairs.
    Writes `eval_report.json`, `eval_report.md` and `training_curves.png` (from
    metrics.jsonl) into the workdir unless `write=False`; returns the report dict.
    """
    from transformer_jax.data import load_split_pairs
    from transformer_jax.training.checkpoints import METRICS_FILE, load_for_inference

    workdir = Path(workdir)
    bundle = load_for_inference(workdir, step)
    config = bundle.config
    split_name = {"test": config.data.test_split, "eval": config.data.eval_split}.get(split)
    if split_name is None:
        raise ValueError(f"split={split!r}; choose 'test' or 'eval'.")
    pairs = load_split_pairs(config.data, split_name)
    if num_examples:
        pairs = pairs[:num_examples]
    if not pairs:
        raise ValueError(f"the {split} split ({split_name!r}) of {config.data.name} is empty.")
    decode_kw = dict(
        beam_size=beam_size or config.eval.beam_size,
        max_decode_len=max_decode_len or config.eval.max_decode_len or config.data.max_tgt_len,
        batch_size=batch_size or config.eval.decode_batch_size,
        alpha=alpha,
    )
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]

    run = decode_sentences(bundle, sources, **decode_kw)  # includes compilation
    timed = decode_sentences(bundle, sources[:SPEED_SENTENCES], **decode_kw)  # compiled
    detok = detokenize_book if book_style(config) else (lambda s: s)
    hyps = [detok(h) for h in run.hypotheses]
    refs = [detok(r) for r in references]
    report = {
        "workdir": str(workdir),
        "step": bundle.step,
        "split": f"{split} ({split_name})",
        "num_sentences": len(pairs),
        **{k: decode_kw[k] for k in ("beam_size", "max_decode_len", "alpha")},
        "bleu": corpus_bleu(hyps, refs),
        "chrf": corpus_chrf(hyps, refs),
        "book_bleu_k2_mean": float(
            np.mean([book_bleu(h, r, k=2) for h, r in zip(run.hypotheses, references, strict=True)])
        ),
        **teacher_forced_loss(bundle, pairs, decode_kw["batch_size"]),
        "decode_seconds_with_compile": run.seconds,
        "decode_tokens_per_sec": timed.generated_tokens / max(timed.seconds, 1e-9),
        "decode_sentences_per_sec": min(len(pairs), SPEED_SENTENCES) / max(timed.seconds, 1e-9),
        "devices": jax.local_device_count(),
        "samples": [
            {"source": s, "reference": r, "translation": h}
            for s, r, h in list(zip(sources, references, run.hypotheses, strict=True))[:num_samples]
        ],
    }
    if write:
        (workdir / REPORT_JSON).write_text(json.dumps(report, indent=2, ensure_ascii=False))
        (workdir / REPORT_MD).write_text(format_report(report))
        metrics = workdir / METRICS_FILE
        if metrics.is_file():
            from transformer_jax.evaluation.plots import plot_training_curves

            try:
                plot_training_curves(metrics, workdir / CURVES_PNG)
                report["curves"] = str(workdir / CURVES_PNG)
            except ValueError:  # a log without loss/BLEU fields: nothing to draw
                pass
    return report


def format_report(report: dict[str, Any]) -> str:
    """A short Markdown report: scores table, then sample translations."""
    lines = [
        f"# Evaluation of {report['workdir']} at step {report['step']}",
        "",
        f"{report['num_sentences']} sentences of the {report['split']} split; beam size "
        f"{report['beam_size']} (α {report['alpha']}), at most {report['max_decode_len']} tokens.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| BLEU (sacrebleu, detokenised) | {report['bleu']:.2f} |",
        f"| chrF (sacrebleu) | {report['chrf']:.2f} |",
        f"| book BLEU (k=2), mean | {report['book_bleu_k2_mean']:.3f} |",
        f"| loss (per-token NLL) | {report['loss']:.4f} |",
        f"| perplexity | {report['perplexity']:.2f} |",
        f"| token accuracy (teacher forced) | {report['accuracy']:.3f} |",
        f"| decoding speed | {report['decode_tokens_per_sec']:.0f} tokens/s, "
        f"{report['decode_sentences_per_sec']:.1f} sentences/s on {report['devices']} "
        "device(s) |",
        f"| decoding wall time incl. compilation | {report['decode_seconds_with_compile']:.1f} s |",
        "",
        "## Samples",
        "",
    ]
    for sample in report["samples"]:
        lines += [
            f"- source: {sample['source']}",
            f"  - reference: {sample['reference']}",
            f"  - translation: {sample['translation']}",
        ]
    return "\n".join(lines) + "\n"
