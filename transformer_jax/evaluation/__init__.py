"""Scores (book BLEU, sacrebleu BLEU/chrF), reports and pictures of a trained model, the train
loop's BLEU evaluator, and the translate command's input and output lines.

`AttentionMaps` / `attention_weights` (computed in `inference.attention_maps`) and
`detokenize_book` (`data.text_form`) are re-exported here beside the plots and scores that
use them."""

from transformer_jax.data.text_form import detokenize_book
from transformer_jax.evaluation.bleu import bleu_interval, book_bleu, corpus_bleu, corpus_chrf
from transformer_jax.evaluation.output_file import write_lines
from transformer_jax.evaluation.plots import (
    plot_attention,
    plot_training_curves,
    read_metrics,
    show_heatmaps,
)
from transformer_jax.evaluation.report import evaluate_translator, evaluate_workdir, format_report
from transformer_jax.evaluation.translate_cli import format_lines, read_sentences, translate_workdir
from transformer_jax.inference.attention_maps import AttentionMaps, attention_weights

__all__ = [
    "AttentionMaps",
    "attention_weights",
    "bleu_interval",
    "book_bleu",
    "corpus_bleu",
    "corpus_chrf",
    "detokenize_book",
    "evaluate_translator",
    "evaluate_workdir",
    "format_lines",
    "format_report",
    "plot_attention",
    "plot_training_curves",
    "read_metrics",
    "read_sentences",
    "show_heatmaps",
    "translate_workdir",
    "write_lines",
]
