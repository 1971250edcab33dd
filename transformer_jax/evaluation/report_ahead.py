"""The closing test report's decoding programs, compiled while the run trains.

    train_and_evaluate(config, workdir, evaluators=[ValidationBleu],
                       compile_ahead=[compile_test_report])

A training launch ends with `report.test_report`: `eval.num_test_examples` evenly spaced test
pairs translated with the run's decoding settings, then a few again (`report.speed_sources`)
to time the steady state. This makes the same two translation calls with the decoders switched
to compiling (`decoding.compile_only`), so that with `precompile` "background"
(`training.precompile`) the report finds its programs compiled.
"""

from __future__ import annotations

from typing import Any

from transformer_jax.data import spread_subset
from transformer_jax.decoding import compile_only
from transformer_jax.evaluation.report import decode_sentences, speed_sources
from transformer_jax.inference import Translator
from transformer_jax.training.evaluators import EvalContext


def compile_test_report(context: EvalContext, params: Any) -> None:
    """Compiles the programs `report.test_report` decodes with (context: the run's; params:
    host parameters of the run's shapes), decoding nothing."""
    config = context.config
    n = config.eval.num_test_examples
    if n < 0 or not context.test_pairs:  # -1: no report
        return
    sources = [src for src, _ in spread_subset(list(context.test_pairs), n)]
    translator = Translator.from_params(
        context.model_config, params, context.src_tokenizer, context.tgt_tokenizer, config=config
    )
    with compile_only.compiling():
        # `report.evaluate_translator`'s two calls: every pair, then the timed few.
        for part in (sources, speed_sources(sources)):
            decode_sentences(translator, part, **translator.settings)
