"""`train_and_evaluate(config, workdir)`: the whole training run, as one readable function.

Resumable (orbax checkpoints with the data position), observable (progress line, JSONL,
TensorBoard) and data-parallel over all devices of all processes.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from transformer_jax import data as data_lib
from transformer_jax.evaluation.bleu import corpus_bleu
from transformer_jax.inference import Translator
from transformer_jax.runtime import compile_log, configure_process
from transformer_jax.training import checkpoints as ckpt
from transformer_jax.training import finetune, history, preemption, workdir_lock
from transformer_jax.training.builder import build
from transformer_jax.training.checkpoint_saves import SaveWatch
from transformer_jax.training.config import resolve_num_train_steps, validate_config
from transformer_jax.training.metrics import MetricWriter, Progress, log, sum_tree, summarize
from transformer_jax.training.parallel import DataParallel
from transformer_jax.training.resume import ConfigChange, check_resume_config, log_changes
from transformer_jax.training.state_checks import check_restored, nonfinite_leaves
from transformer_jax.training.workdir import check_workdir


class NonFiniteLossError(FloatingPointError):
    """The loss or the gradient became NaN/Inf; the run stops without saving that state."""


@dataclasses.dataclass(frozen=True)
class StepEnd:
    """What an `after_step` hook sees after each device call; valid during the call only."""

    step: int  # optimizer steps done
    total_steps: int
    batches: list[dict[str, np.ndarray]]  # this call's host batches, leaves (B_proc, ...)
    params: Callable[[], Any]  # fetches the current parameters to the host (waits for the step)


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str | Path,
    *,
    init_from: str | Path | None = None,
    restart_from_scratch: bool = False,
    after_step: Callable[[StepEnd], bool] | None = None,
) -> dict[str, Any]:
    """Trains (or resumes) in `workdir`, evaluates, checkpoints; returns the final eval metrics.

    A workdir is one run. A config that changes its model, vocabulary or data is refused
    before anything is written (`resume.ConfigMismatchError`); keys a resume may change are
    recorded. `init_from` (another workdir) starts a new run from that run's parameters with
    a fresh optimizer (`finetune`); it is used only while `workdir` has no checkpoint, so
    re-running the same command resumes the fine-tune. A workdir whose checkpoints are all
    unusable is not trained over (`history.NoUsableCheckpointError`) unless
    `restart_from_scratch`, which moves the old history aside and starts from step 0.

    A workdir that holds metrics but never committed a checkpoint (the run stopped before its
    first save) starts afresh, its history moved aside (`history.ever_checkpointed`).

    One trainer per workdir: `<workdir>/.lock` is held for the whole run, and a second
    trainer raises `workdir_lock.WorkdirLockedError` at once. SIGTERM or SIGINT during the
    loop saves a checkpoint after the step in flight and raises `preemption.Preempted`; a
    second signal ends the process at once. A failed save (a full disk) raises
    `checkpoint_saves.CheckpointSaveError` before the run trains on.

    `after_step`, for measurements only (time to BLEU, compile counts): called on the host
    after every device call; returning True ends the run there as if it were the last step.
    """
    workdir = check_workdir(workdir)
    configure_process(config)  # before anything computes (XLA flags, host memory)
    # Process 0 holds the lock for all processes of a multi-host run (one shared workdir).
    with workdir_lock.hold(workdir, enabled=jax.process_index() == 0):
        return _train_and_evaluate(
            config,
            workdir,
            init_from=init_from,
            restart_from_scratch=restart_from_scratch,
            after_step=after_step,
        )


def _train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: Path,
    *,
    init_from: str | Path | None,
    restart_from_scratch: bool,
    after_step: Callable[[StepEnd], bool] | None,
) -> dict[str, Any]:
    """`train_and_evaluate` once the workdir is locked."""
    # ---------------------------------------------------------------- validate and set up
    validate_config(config, num_devices=jax.local_device_count(), process_count=jax.process_count())
    changes = check_resume_config(config, workdir)  # writes nothing; raises on refused keys
    if init_from is not None:
        init_from = finetune.check_init_from(init_from, workdir)
    is_main = jax.process_index() == 0
    parallel = DataParallel.create(config.parallelism)

    # ---------------------------------------------------------------- data
    own_tokenizers = workdir / ckpt.TOKENIZER_DIR
    tokenizer_dir = (
        own_tokenizers
        if own_tokenizers.is_dir()
        else (init_from / ckpt.TOKENIZER_DIR if init_from is not None else None)
    )
    pipeline = data_lib.create_input_pipeline(
        config.data,
        row_multiple=parallel.num_local_devices,  # so put_batch splits every batch evenly
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        tokenizers=ckpt.load_workdir_tokenizers(tokenizer_dir) if tokenizer_dir else None,
    )
    src_tok, tgt_tok = pipeline.src_tokenizer, pipeline.tgt_tokenizer
    train_iter = pipeline.train_iter
    total_steps = resolve_num_train_steps(config, train_iter.batches_per_epoch)
    vocab_meta = ckpt.vocabulary_meta(src_tok, tgt_tok)

    # ---------------------------------------------------------------- model, optimizer, steps
    built = build(
        config,
        src_vocab_size=src_tok.vocab_size,
        tgt_vocab_size=tgt_tok.vocab_size,
        total_steps=total_steps,
        parallel=parallel,
    )
    abstract_state = built.abstract_state()

    # ---------------------------------------------------------------- restore or initialise
    if is_main:
        workdir.mkdir(parents=True, exist_ok=True)
    manager = ckpt.make_manager(workdir, keep=config.keep_checkpoints)

    def check_data_position(state: Any, data_state: dict, meta: dict, step: int) -> None:
        check_restored(
            state,
            abstract_state,
            meta,
            step=step,
            data_state=data_state,
            batches_per_epoch=train_iter.batches_per_epoch,
        )

    try:
        restored = ckpt.restore_latest(manager, abstract_state, check=check_data_position)
        if restored is not None:
            state, data_state, meta = restored
            ckpt.check_vocabulary_meta(meta, src_tok, tgt_tok)
            train_iter.set_state(data_state)
            vocab_meta.update({k: meta[k] for k in finetune.PROVENANCE_KEYS if k in meta})
            dropped = history.truncate_metrics(workdir, int(state.step)) if is_main else 0
            log(
                "Resumed from step %d (%s)%s",
                int(state.step),
                manager.directory,
                f"; dropped {dropped} metrics.jsonl records of later steps" if dropped else "",
            )
            if restart_from_scratch:
                log("--restart_from_scratch ignored: %s has a usable checkpoint.", workdir)
        else:
            lost = history.lost_history(workdir)
            never_saved = lost is not None and not history.ever_checkpointed(workdir)
            if lost and not (restart_from_scratch or never_saved):
                raise history.NoUsableCheckpointError(
                    f"{workdir} has no usable checkpoint but holds a previous run ({lost}); "
                    "refusing to train over it from step 0. Re-run with --restart_from_scratch "
                    "to move its history to previous_runs/ and start again, or use a new --workdir."
                )
            if lost and is_main:
                log(
                    "%s: moved %s to %s",
                    "No checkpoint was saved before the previous run stopped; starting afresh"
                    if never_saved
                    else "Restarting from scratch",
                    lost,
                    history.move_history_aside(workdir),
                )
            if init_from is not None:
                state, source_step = finetune.init_from_state(
                    init_from, abstract_state, built.tx, config.seed
                )
                vocab_meta.update(finetune.provenance(init_from, source_step))
                log(
                    "Fine-tuning the parameters of %s (step %d), fresh optimizer",
                    init_from,
                    source_step,
                )
            else:
                with compile_log.kind("init"):
                    state = built.init_state()
    except BaseException:  # a refused start leaves no manager threads behind
        manager.close()
        raise
    start_step = int(state.step)
    if is_main:  # only now: a refused or failed start leaves the workdir as it was
        _save_config(config, workdir, changes)
        if not own_tokenizers.is_dir():
            data_lib.save_tokenizers(src_tok, tgt_tok, own_tokenizers)
            ckpt.save_truecaser(pipeline.truecaser, own_tokenizers, tokenizer_dir)
    # TensorBoard hides events of steps after the restored one (written before a kill).
    writer = MetricWriter(
        workdir, enabled=is_main, purge_step=start_step + 1 if start_step else None
    )
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

    # ---------------------------------------------------------------- call boundaries
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

    device_state = parallel.put_replicated(state)
    del state  # the device copy is donated to the step from here on

    def evaluate(step: int, record: bool = True) -> dict[str, float]:
        sums = []
        for i, batch in enumerate(pipeline.eval_batches("eval")):
            if config.eval.num_batches and i >= config.eval.num_batches:
                break
            batch = {k: v for k, v in batch.items() if k != "index"}
            with compile_log.kind("eval"):
                sums.append(built.eval_step(device_state.params, parallel.put_batch(batch)))
        summary = summarize(sum_tree(parallel.get_replicated(sums)))
        bleu = (
            _bleu(
                config,
                parallel.get_replicated(device_state.params),
                built.eval_model_config,
                pipeline,
                writer if record else None,
                step,
            )
            if is_main
            else None
        )
        if bleu is not None:
            summary["bleu"] = bleu
        if record:
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
        bad = nonfinite_leaves(host_state)  # params and optimizer moments
        if bad:
            raise NonFiniteLossError(
                f"Non-finite state after step {step} ({', '.join(bad[:5])}); not saving this state."
            )
        saves.save(host_state, train_iter.get_state(), vocab_meta)

    saves = SaveWatch(manager)  # a failed save stops the run, in one line
    stop = preemption.StopSignals.install()  # SIGTERM/SIGINT: save after this step, stop
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
            with compile_log.kind("train step"):
                if n == 1:
                    batch = parallel.put_batch(host_batches[0])
                    device_state, metrics = built.train_step(device_state, batch)
                else:  # several optimizer steps in one call (lax.scan): config.steps_per_call
                    batches = parallel.put_batches(host_batches)
                    device_state, metrics = built.train_steps(device_state, batches)
            step += n
            pending.append((step, n, metrics))  # stays on device: no host sync in the hot loop
            saves.check(step)  # a save that failed (disk full) stops the run here
            ended = after_step is not None and after_step(
                StepEnd(step, total_steps, host_batches, current_params)
            )
            signalled = stop.requested(step, every=config.log_every_steps)

            last = step == total_steps or ended
            do_eval = not signalled and (
                last or (config.eval_every_steps and step % config.eval_every_steps == 0)
            )
            do_save = (
                last
                or signalled
                or (config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0)
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
            if signalled:  # `saves.close()` below waits for the save before this is reported
                raise preemption.Preempted(signalled, step)
            if do_eval:
                final = evaluate(step)
            if ended:
                break

        # ---------------------------------------------------------------- final evaluation
        if final is None:  # nothing left to train: the checkpoint was already at the last step
            log("Nothing to train: the checkpoint is at step %d of %d.", start_step, total_steps)
            final = evaluate(start_step, record=False)  # already in metrics.jsonl
            previous = history.last_record(workdir, "train") if is_main else None
            if previous and previous.get("loss") is not None:
                summary = {"loss": previous["loss"]}
        signalled = stop.requested(step, every=1)  # during the final evaluation
        if signalled:  # the last step is saved: the same command evaluates again
            raise preemption.Preempted(signalled, step)
    finally:  # a save in flight is completed even when the loop raised (e.g. NaN)
        stop.restore()
        saves.close()
        writer.close()
    if "loss" in summary:
        final["train_loss"] = summary["loss"]
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
                    "this state is not saved. Lower learning_rate or set clip_norm (a resume "
                    "with --config.learning_rate=... is accepted and recorded)."
                )


def _save_config(
    config: ml_collections.ConfigDict, workdir: Path, changes: list[ConfigChange]
) -> None:
    """Records the config of the run (with the accepted changes of a resume, logged)."""
    log_changes(changes, workdir)
    ckpt.save_config(config, workdir)


def _bleu(config, params, model_config, pipeline, writer, step) -> float | None:
    """sacreBLEU (detokenised) on `eval.num_bleu_examples` evenly spaced validation pairs."""
    n = config.eval.num_bleu_examples
    if not n:
        return None
    pairs = data_lib.spread_subset(pipeline.eval_pairs, n)
    start = time.perf_counter()
    translator = Translator.from_params(
        model_config, params, pipeline.src_tokenizer, pipeline.tgt_tokenizer, config=config
    )
    # warn=False: a sentence longer than the training limit is translated whole, silently.
    with compile_log.kind("decode"):
        hypotheses = translator.translate([src for src, _ in pairs], warn=False)
    bleu = corpus_bleu(
        [translator.detokenize(h) for h in hypotheses],
        [translator.detokenize(t) for _, t in pairs],
    )
    k = config.eval.num_examples_to_show
    shown = [
        f"{src} => {hyp}  (ref: {tgt})"
        for (src, tgt), hyp in zip(pairs[:k], hypotheses[:k], strict=True)
    ]
    for line in shown:
        log("  %s", line)
    if writer is not None:
        writer.write_text(step, "eval/translations", "\n\n".join(shown))
    log("BLEU on %d pairs: %.2f (%.1fs)", len(pairs), bleu, time.perf_counter() - start)
    return bleu
