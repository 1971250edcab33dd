"""Scores (book BLEU, sacrebleu BLEU/chrF), reports and pictures of a trained model, the train
loop's BLEU evaluator, and the translate command's input and output lines.

`AttentionMaps` / `attention_weights` (computed in `inference.attention_maps`) and
`detokenize_book` (`data.text_form`) are re-exported here beside the plots and scores that
use them."""

from transformer_jax import lazy

__getattr__, __dir__, __all__ = lazy.exports(
    __name__,
    {
        "transformer_jax.data.text_form": ["detokenize_book"],
        "transformer_jax.evaluation.bleu": [
            "bleu_interval",
            "book_bleu",
            "corpus_bleu",
            "corpus_chrf",
        ],
        "transformer_jax.evaluation.output_file": ["write_lines"],
        "transformer_jax.evaluation.plots": [
            "plot_attention",
            "plot_training_curves",
            "read_metrics",
            "show_heatmaps",
        ],
        "transformer_jax.evaluation.report": [
            "evaluate_translator",
            "evaluate_workdir",
            "format_report",
        ],
        "transformer_jax.evaluation.translate_cli": [
            "format_lines",
            "read_sentences",
            "translate_workdir",
        ],
        "transformer_jax.inference.attention_maps": ["AttentionMaps", "attention_weights"],
    },
)
