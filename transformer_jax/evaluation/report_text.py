"""An evaluation report as text: the lines a training launch prints, and the Markdown file.

    print("\n".join(summary_lines(report)))   # BLEU ± interval, chrF, signatures, the table
    Path("eval_report.md").write_text(format_report(report))

`report` is the dict `report.evaluate_workdir` / `evaluate_translator` return.
"""

from __future__ import annotations

from typing import Any

from transformer_jax.evaluation.bleu import format_length_table


def summary_lines(report: dict[str, Any]) -> list[str]:
    """BLEU and chrF with their signatures, then the BLEU-by-source-length table."""
    return [
        f"BLEU {report['bleu']:.2f}{_interval(report)}  chrF {report['chrf']:.2f}  on "
        f"{report['split']}, beam {report['beam_size']}",
        f"  sacreBLEU signature: {report['bleu_signature']}",
        f"  chrF signature: {report['chrf_signature']}",
        "",
        *format_length_table(report["bleu_by_length"], _total(report)),
    ]


def _total(report: dict[str, Any]) -> dict[str, Any]:
    """The 'all' row of the length table."""
    keys = ("bleu", "bleu_ci95", "chrf")
    return {"count": report["num_sentences"], **{k: report.get(k) for k in keys}}


def _interval(report: dict[str, Any]) -> str:
    ci = report.get("bleu_ci95")  # reports written before the interval have none
    return "" if ci is None else f" ± {ci:.2f} (95 % bootstrap interval)"


def format_report(report: dict[str, Any]) -> str:
    """A short Markdown report: scores, BLEU by source length, then sample translations."""
    budget = (
        f"at most {report['max_decode_len']} tokens"
        if report["max_decode_len"]
        else f"at most {report['max_len_a']:g}·W + {report['max_len_b']} tokens (W = source width)"
    )
    averaged = report.get("averaged_steps")
    title = f"# Evaluation of {report['workdir']} at step {report['step']}"
    if averaged:
        title += f" (parameters averaged over steps {', '.join(map(str, averaged))})"
    lines = [
        title,
        "",
        f"{report['num_sentences']:,} sentences of the {report['split']} split; beam size "
        f"{report['beam_size']} (α {report['alpha']}), {budget}.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| BLEU (sacreBLEU, detokenised) | {report['bleu']:.2f}{_interval(report)} |",
        f"| chrF (sacreBLEU) | {report['chrf']:.2f} |",
        f"| book BLEU (k=2), mean | {report['book_bleu_k2_mean']:.3f} |",
    ]
    if "loss" in report:
        skipped = report.get("loss_pairs_skipped", 0)
        note = f" ({skipped} pairs beyond the training limits left out)" if skipped else ""
        lines += [
            f"| loss (per-token NLL){note} | {report['loss']:.4f} |",
            f"| perplexity | {report['perplexity']:.2f} |",
            f"| token accuracy (teacher forced) | {report['accuracy']:.3f} |",
        ]
    if "decode_tokens_per_sec" in report:
        lines.append(
            f"| decoding speed | {report['decode_tokens_per_sec']:.0f} tokens/s, "
            f"{report['decode_sentences_per_sec']:.1f} sentences/s on {report['devices']} "
            "device(s) |"
        )
    lines += [
        f"| decoding wall time incl. compilation | {report['decode_seconds_with_compile']:.1f} s |",
        "",
        f"sacreBLEU signatures: BLEU `{report['bleu_signature']}`, chrF "
        f"`{report['chrf_signature']}`.",
        "",
        "## BLEU by source length",
        "",
        *format_length_table(report["bleu_by_length"], _total(report)),
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
