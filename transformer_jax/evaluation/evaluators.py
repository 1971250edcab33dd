"""The train loop's evaluators (`training.evaluators`): BLEU of the current parameters.

train_and_evaluate(config, workdir, evaluators=[ValidationBleu])
"""

from __future__ import annotations

import time
from typing import Any

from transformer_jax.data import spread_subset
from transformer_jax.decoding import compile_only
from transformer_jax.evaluation.bleu import corpus_bleu
from transformer_jax.inference import Translator
from transformer_jax.runtime import compile_log
from transformer_jax.training.evaluators import EvalContext
from transformer_jax.training.metrics import log


class ValidationBleu:
    """sacreBLEU (detokenised) on `eval.num_bleu_examples` evenly spaced validation pairs,
    decoded as the run's config says (`inference.decode_settings`); returns {"bleu": ...,
    "translations": the first `eval.num_examples_to_show` beside their references}, or {}
    when `num_bleu_examples` is 0."""

    def __init__(self, context: EvalContext):
        self.context = context
        n = context.config.eval.num_bleu_examples  # 0: no BLEU (spread_subset's 0 is "all")
        self.pairs = spread_subset(list(context.eval_pairs), n) if n else []

    def __call__(self, params: Any, step: int) -> dict[str, float | str]:
        c = self.context
        if not self.pairs:
            return {}
        start = time.perf_counter()
        translator, hypotheses = self._translate(params)
        bleu = corpus_bleu(
            [translator.detokenize(h) for h in hypotheses],
            [translator.detokenize(t) for _, t in self.pairs],
        )
        k = c.config.eval.num_examples_to_show
        shown = [
            f"{src} => {hyp}  (ref: {tgt})"
            for (src, tgt), hyp in zip(self.pairs[:k], hypotheses[:k], strict=True)
        ]
        for line in shown:
            log("  %s", line)
        log("BLEU on %d pairs: %.2f (%.1fs)", len(self.pairs), bleu, time.perf_counter() - start)
        return {"bleu": bleu, "translations": "\n\n".join(shown)}

    def compile_ahead(self, params: Any) -> None:
        """Compiles the decoding programs `__call__` runs, decoding nothing
        (`training.precompile`: in a thread while the run trains)."""
        if self.pairs:
            with compile_only.compiling():
                self._translate(params)

    def _translate(self, params: Any) -> tuple[Translator, list[str]]:
        c = self.context
        translator = Translator.from_params(
            c.model_config, params, c.src_tokenizer, c.tgt_tokenizer, config=c.config
        )
        # warn=False: a sentence longer than the training limit is translated whole, silently.
        with compile_log.kind("decode"):
            return translator, translator.translate([src for src, _ in self.pairs], warn=False)
