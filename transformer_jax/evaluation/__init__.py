"""Scores (book BLEU, sacrebleu BLEU/chrF), reports and pictures of a trained model."""

from transformer_jax.evaluation.bleu import book_bleu, corpus_bleu, corpus_chrf, detokenize_book
from transformer_jax.evaluation.plots import (
    plot_attention,
    plot_training_curves,
    read_metrics,
    show_heatmaps,
)
from transformer_jax.evaluation.report import evaluate_workdir, format_report
from transformer_jax.evaluation.translate_cli import read_sentences, translate_workdir

__all__ = [
    "book_bleu",
    "corpus_bleu",
    "corpus_chrf",
    "detokenize_book",
    "evaluate_workdir",
    "format_report",
    "plot_attention",
    "plot_training_curves",
    "read_metrics",
    "read_sentences",
    "show_heatmaps",
    "translate_workdir",
]
