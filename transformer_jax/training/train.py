"""`train_and_evaluate(config, workdir)`: the whole training run, as one readable function.

Resumable (orbax checkpoints with the data position), observable (progress line, JSONL,
TensorBoard) and data-parallel over all devices of all processes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging

from transformer_jax import data as data_lib
from transformer_jax.decoding import DecodingWarning, decode_settings, translate
from transformer_jax.evaluation.bleu import corpus_bleu, detokenize_book
from transformer_jax.evaluation.report import book_style
from transformer_jax.nn import Transformer
from transformer_jax.training import checkpoints as ckpt
from transformer_jax.training.config import resolve_num_train_steps, validate_config
from transformer_jax.training.metrics import MetricWriter, Progress, log, sum_tree, summarize
from transformer_jax.training.optimizer import make_optimizer
from transformer_jax.training.parallel import DataParallel
from transformer_jax.training.runtime import configure_process
from transformer_jax.training.state import (
    abstract_train_state,
    create_train_state,
    model_config_from,
)
from transformer_jax.training.step import eval_step, step_kwargs, train_step, train_steps


class NonFiniteLossError(FloatingPointError):
    """The loss or the gradient became NaN/Inf; the run stops without saving that state."""


@dataclasses.dataclass(frozen=True)
class StepEnd:
    """What an `after_step` hook sees after each device call; valid during the call only."""

    step: int  # optimizer steps done
    total_steps: int
    batches: list[dict[str, np.ndarray]]  # this call's host batches, leaves (D_local, B_dev, ...)
    params: Callable[[], Any]  # fetches the current parameters to the host (waits for the step)


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str | Path,
    *,
    after_step: Callable[[StepEnd], bool] | None = None,
) -> dict[str, Any]:
    """Trains (or resumes) in `workdir`, evaluates, checkpoints; returns the final eval metrics.

    `after_step`, for measurements only (time to BLEU, compile counts): called on the host
    after every device call; returning True ends the run there as if it were the last step.
    """
    # ---------------------------------------------------------------- validate and set up
    workdir = Path(workdir)
    configure_process(config)  # before anything computes (XLA flags, host memory)
    validate_config(config, num_devices=jax.local_device_count(), process_count=jax.process_count())
    is_main = jax.process_index() == 0
    if is_main:
        workdir.mkdir(parents=True, exist_ok=True)
        _save_config(config, workdir)
    parallel = DataParallel.create(config.parallelism)
    writer = MetricWriter(workdir, enabled=is_main)

    # ---------------------------------------------------------------- data
    pipeline = data_lib.create_input_pipeline(
        config.data,
        num_devices=jax.local_device_count(),
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    )
    src_tok, tgt_tok = pipeline.src_tokenizer, pipeline.tgt_tokenizer
    train_iter = pipeline.train_iter
    total_steps = resolve_num_train_steps(config, train_iter.batches_per_epoch)
    if is_main and not (workdir / ckpt.TOKENIZER_DIR).is_dir():
        data_lib.save_tokenizers(src_tok, tgt_tok, workdir / ckpt.TOKENIZER_DIR)
    vocab_meta = ckpt.vocabulary_meta(src_tok, tgt_tok)

    # ---------------------------------------------------------------- model and optimizer
    model_config = model_config_from(config, src_tok.vocab_size, tgt_tok.vocab_size)
    tx, schedule = make_optimizer(config, model_config.model_dim, total_steps)

    # ---------------------------------------------------------------- restore or initialise
    manager = ckpt.make_manager(workdir, keep=config.keep_checkpoints)
    restored = ckpt.restore_latest(manager, abstract_train_state(model_config, tx))
    if restored is not None:
        state, data_state, meta = restored
        ckpt.check_vocabulary_meta(meta, src_tok, tgt_tok)
        train_iter.set_state(data_state)
        log("Resumed from step %d (%s)", int(state.step), manager.directory)
    else:
        state = create_train_state(model_config, tx, config.seed)
    start_step = int(state.step)
    log(
        "Training %s for %d steps (%d per epoch) from step %d on %d devices (%s), %s params",
        workdir,
        total_steps,
        train_iter.batches_per_epoch,
        start_step,
        jax.device_count(),
        config.parallelism,
        f"{sum(x.size for x in jax.tree.leaves(state.params)):,}",
    )

    # ---------------------------------------------------------------- map the steps
    kwargs = step_kwargs(config, model_config, tx, schedule)
    p_train_step = parallel.map_train_step(functools.partial(train_step, **kwargs))
    # Several optimizer steps per call (lax.scan) when config.steps_per_call > 1.
    p_train_steps = parallel.map_train_steps(functools.partial(train_steps, **kwargs))

    def next_boundary(step: int) -> int:
        """The first step after `step` that logs, evaluates, checkpoints or ends the run."""
        ends = [total_steps]
        for every in (
            config.log_every_steps,
            config.eval_every_steps,
            config.checkpoint_every_steps,
        ):
            if every:
                ends.append((step // every + 1) * every)
        return min(ends)

    eval_model_config = model_config.replace(deterministic=True)
    p_eval_step = parallel.map_eval_step(
        functools.partial(eval_step, model=Transformer(eval_model_config))
    )
    device_state = parallel.put_replicated(state)
    del state  # the device copy is donated to the step from here on

    def evaluate(step: int) -> dict[str, float]:
        sums = []
        for i, batch in enumerate(pipeline.eval_batches("eval")):
            if config.eval.num_batches and i >= config.eval.num_batches:
                break
            batch = {k: v for k, v in batch.items() if k != "index"}
            sums.append(p_eval_step(device_state.params, parallel.put_batch(batch)))
        summary = summarize(sum_tree(parallel.get_replicated(sums)))
        bleu = (
            _bleu(
                config,
                parallel.get_replicated(device_state.params),
                eval_model_config,
                pipeline,
                writer,
                step,
            )
            if is_main
            else None
        )
        if bleu is not None:
            summary["bleu"] = bleu
        writer.write(step, "eval", summary)
        log(
            "eval @ step %d | loss %.4f | ppl %.2f | accuracy %.3f%s",
            step,
            summary["nll"],
            summary["perplexity"],
            summary["accuracy"],
            f" | BLEU {bleu:.2f}" if bleu is not None else "",
        )
        return summary

    def current_params() -> Any:
        return parallel.get_replicated(device_state.params)

    def checkpoint(step: int) -> None:
        host_state = parallel.get_replicated(device_state)
        leaves = jax.tree_util.tree_leaves_with_path(host_state.params)
        bad = [jax.tree_util.keystr(path) for path, x in leaves if not np.isfinite(x).all()]
        if bad:
            raise NonFiniteLossError(
                f"Non-finite parameters after step {step} ({', '.join(bad[:5])}); "
                "not saving this state."
            )
        ckpt.save_checkpoint(manager, host_state, train_iter.get_state(), vocab_meta)

    try:
        # ---------------------------------------------------------------- train loop
        progress = Progress(total_steps, start_step)
        pending: list[tuple[int, Any]] = []  # (step, device metrics) not yet fetched
        summary: dict[str, float] = {}
        final: dict[str, float] | None = None
        step = start_step
        while step < total_steps:
            n = min(config.steps_per_call, next_boundary(step) - step)
            host_batches = [next(train_iter) for _ in range(n)]
            if n == 1:
                batch = parallel.put_batch(host_batches[0])
                device_state, metrics = p_train_step(device_state, batch)
            else:
                batches = parallel.put_batches(host_batches)
                device_state, metrics = p_train_steps(device_state, batches)
            step += n
            pending.append((step, n, metrics))  # stays on device: no host sync in the hot loop
            stop = after_step is not None and after_step(
                StepEnd(step, total_steps, host_batches, current_params)
            )

            last = step == total_steps or stop
            do_eval = last or (config.eval_every_steps and step % config.eval_every_steps == 0)
            do_save = last or (
                config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0
            )
            if step % config.log_every_steps == 0 or do_eval or do_save:
                # ------------------------------------------------------------ fetch and log
                host = [
                    item
                    for end, n, m in pending
                    for item in _per_step(end, n, parallel.get_replicated(m))
                ]
                pending.clear()
                _check_finite(host)
                summary = summarize(sum_tree([m for _, m in host]))
                summary["learning_rate"] = float(host[-1][1]["learning_rate"])
                summary["grad_norm"] = float(np.mean([m["grad_norm"] for _, m in host]))
                summary["epoch"] = train_iter.epoch
                line = progress.line(step, summary, f" | epoch {train_iter.epoch}")
                summary["steps_per_sec"] = progress.steps_per_sec
                summary["tokens_per_sec"] = progress.tokens_per_sec
                writer.write(step, "train", summary)
                log(line)
            if do_save:
                checkpoint(step)  # asynchronous write; NaN states never get here
            if do_eval:
                final = evaluate(step)
            if stop:
                break

        # ---------------------------------------------------------------- final evaluation
        if final is None:  # nothing left to train: the checkpoint was already at the last step
            log("Nothing to train: the checkpoint is at step %d of %d.", start_step, total_steps)
            final = evaluate(start_step)
    finally:  # a save in flight is completed even when the loop raised (e.g. NaN)
        manager.wait_until_finished()
        manager.close()
        writer.close()
    final["train_loss"] = summary.get("loss", float("nan"))
    log("Final validation: %s", json.dumps({k: round(v, 4) for k, v in final.items()}))
    return final


def _per_step(
    end: int, n: int, metrics: dict[str, np.ndarray]
) -> list[tuple[int, dict[str, np.ndarray]]]:
    """Metrics of a call that ran steps end-n+1..end -> one (step, metrics) per step."""
    if n == 1:
        return [(end, metrics)]
    return [(end - n + 1 + i, {k: v[i] for k, v in metrics.items()}) for i in range(n)]


def _check_finite(host_metrics: list[tuple[int, dict[str, np.ndarray]]]) -> None:
    for step, metrics in host_metrics:
        for key in ("loss", "grad_norm"):
            if not np.isfinite(metrics[key]):
                raise NonFiniteLossError(
                    f"{key} is {float(metrics[key])} at step {step}: the run is stopped and "
                    "this state is not saved. Lower learning_rate, set clip_norm, or resume "
                    "from the last checkpoint with another seed."
                )


def _save_config(config: ml_collections.ConfigDict, workdir: Path) -> None:
    previous = workdir / ckpt.CONFIG_FILE
    if previous.is_file():
        old = ckpt.load_config(workdir).to_dict()
        changed = _diff("", old, json.loads(json.dumps(config.to_dict(), default=list)))
        if changed:
            logging.warning("Config differs from the one in %s: %s", previous, changed)
    ckpt.save_config(config, workdir)


def _diff(prefix: str, old: Any, new: Any) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d
            for k in sorted(set(old) | set(new))
            for d in _diff(f"{prefix}{k}.", old.get(k), new.get(k))
        ]
    return [] if old == new else [f"{prefix[:-1]}: {old!r} -> {new!r}"]


def _bleu(config, params, model_config, pipeline, writer, step) -> float | None:
    """sacreBLEU (detokenised) on `eval.num_bleu_examples` evenly spaced validation pairs."""
    n = config.eval.num_bleu_examples
    if not n:
        return None
    pairs = data_lib.spread_subset(pipeline.eval_pairs, n)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodingWarning)  # sentences longer than the limit
        hypotheses = translate(
            model_config,
            params,
            pipeline.src_tokenizer,
            pipeline.tgt_tokenizer,
            [src for src, _ in pairs],
            **decode_settings(config),
        )
    detok = detokenize_book if book_style(config) else (lambda text: text)
    bleu = corpus_bleu([detok(h) for h in hypotheses], [detok(t) for _, t in pairs])
    k = config.eval.num_examples_to_show
    shown = [
        f"{src} => {hyp}  (ref: {tgt})"
        for (src, tgt), hyp in zip(pairs[:k], hypotheses[:k], strict=True)
    ]
    for line in shown:
        log("  %s", line)
    writer.write_text(step, "eval/translations", "\n\n".join(shown))
    log("BLEU on %d pairs: %.2f (%.1fs)", len(pairs), bleu, time.perf_counter() - start)
    return bleu
