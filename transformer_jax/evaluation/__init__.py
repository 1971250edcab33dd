"""Scores (book BLEU, sacrebleu BLEU/chrF), reports and pictures of a trained model."""

from transformer_jax.evaluation.bleu import book_bleu, corpus_bleu, corpus_chrf, detokenize_book
from transformer_jax.evaluation.plots import (
    plot_attention,
    plot_training_curves,
    read_metrics,
    show_heatmaps,
)

__all__ = [
    "book_bleu",
    "corpus_bleu",
    "corpus_chrf",
    "detokenize_book",
    "plot_attention",
    "plot_training_curves",
    "read_metrics",
    "show_heatmaps",
]
