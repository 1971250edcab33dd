"""What the train loop hands its evaluators, and what it takes back (big_vision's evaluators).

    train_and_evaluate(config, workdir, evaluators=[ValidationBleu])   # evaluation.evaluators

Each entry of `evaluators` is called once, when the run's tokenizers and model exist, with an
`EvalContext`, and returns an `Evaluator`. At every evaluation the loop computes the
validation loss itself, then calls each evaluator with the current parameters (host numpy)
and the step. An evaluator returns named results: numbers are eval metrics (metrics.jsonl,
TensorBoard, the eval log line, the final validation dict), strings are text summaries
(TensorBoard's text tab, e.g. sample translations).

An evaluator may also have a `compile_ahead(params)` method that compiles the programs its
calls will run without running them (`decoding.compile_only`), and a launcher may pass
`compile_ahead` functions of its own (context, host params) for what it runs after training
(the closing test report): with `precompile` "background" the loop runs them in a thread
once the train step is compiled, while the run trains (`training.precompile`).

The loop knows nothing of what an evaluator does, so `training/` imports neither
`inference/` nor `evaluation/`: a launcher chooses the evaluators (experiments/train.py,
the notebook). Evaluators run on process 0 only (they translate on its local devices).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import ml_collections

from transformer_jax.nn import ModelConfig


@dataclasses.dataclass(frozen=True)
class EvalContext:
    """What an evaluator may know of the run it evaluates."""

    config: ml_collections.ConfigDict  # the run config
    model_config: ModelConfig  # deterministic: the model in eval mode
    src_tokenizer: Any
    tgt_tokenizer: Any
    eval_pairs: Sequence[tuple[str, str]]  # the validation pairs, as the data stores them
    test_pairs: Sequence[tuple[str, str]] = ()  # the test split's pairs, all of them


# (host params, step) -> {name: number (an eval metric) | str (a text summary)}
Evaluator = Callable[[Any, int], dict[str, float | str]]
MakeEvaluator = Callable[[EvalContext], Evaluator]
# (context, host params) -> None: compiles what the launcher will decode after training
CompileAhead = Callable[[EvalContext, Any], None]
