"""`train_and_evaluate(config, workdir)`: the whole training run, as one readable function.

In Flax WMT's order: data, model, `restore_or_init`, then the loop (train step, `log_and_check`,
`save`, `evaluate` with the launcher's evaluators), then the final validation. Resumable
(orbax checkpoints with the data position), observable (progress line, JSONL, TensorBoard)
and data-parallel over all devices of all processes.

A workdir is one run. A config that changes its model, vocabulary or data is refused before
anything is written (`workdir.resume`); keys a resume may change are recorded. `init_from`
(another workdir) starts a new run from that run's parameters with a fresh optimizer
(`finetune`); it is used only while `workdir` has no checkpoint, so re-running the same
command resumes the fine-tune. A workdir whose checkpoints are all unusable is not trained
over (`history.NoUsableCheckpointError`) unless `restart_from_scratch`, which moves the old
history aside and starts from step 0; one that never committed a checkpoint (the run stopped
before its first save) starts afresh, its history moved aside (`history.ever_checkpointed`),
even with a changed model or data config (`resume`: nothing is at stake; its tokenizers are
built again, as is a `tokenizer/` a kill cut short). A config whose length the checkpoint
has reached or passed trains nothing and records nothing. A write that fails (a full disk)
stops the run in one line (`directory.WorkdirWriteError`).

One trainer per workdir: `<workdir>/.lock` is held for the whole run, and a second trainer
raises `workdir.lock.WorkdirLockedError` at once. SIGTERM or SIGINT during the loop saves a
checkpoint after the step in flight and raises `preemption.Preempted`; a second signal ends
the process at once. A failed save (a full disk) raises
`checkpoint_saves.CheckpointSaveError` before the run trains on.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging

from transformer_jax import data as data_lib
from transformer_jax.runtime import compile_log, configure_process
from transformer_jax.runtime.commands import command
from transformer_jax.training import finetune, precompile, preemption
from transformer_jax.training.builder import Built, build
from transformer_jax.training.config import resolve_num_train_steps, run_defaults, validate_config
from transformer_jax.training.evaluators import (
    CompileAhead,
    EvalContext,
    Evaluator,
    MakeEvaluator,
)
from transformer_jax.training.metrics import MetricWriter, Progress, log, sum_tree, summarize
from transformer_jax.training.out_of_memory import MemoryWatch
from transformer_jax.training.parallel import DataParallel
from transformer_jax.training.restore import restore_or_init
from transformer_jax.training.state import TrainState
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir import history
from transformer_jax.workdir import lock as workdir_lock
from transformer_jax.workdir.checkpoint_saves import SaveWatch
from transformer_jax.workdir.directory import check_workdir
from transformer_jax.workdir.resume import ConfigChange, check_resume_config, log_changes
from transformer_jax.workdir.state_checks import nonfinite_leaves


class NonFiniteLossError(FloatingPointError):
    """The loss or the gradient became NaN/Inf; the run stops without saving that state."""


@dataclasses.dataclass(frozen=True)
class StepEnd:
    """What an `after_step` hook sees after each device call; valid during the call only."""

    step: int  # optimizer steps done
    total_steps: int
    batches: list[dict[str, np.ndarray]]  # this call's host batches, leaves (B_proc, ...)
    params: Callable[[], Any]  # fetches the current parameters to the host (waits for the step)


@dataclasses.dataclass(frozen=True)
class Run:
    """What stays fixed while a run trains; the loop passes the train state on its own."""

    config: ml_collections.ConfigDict
    workdir: Path
    total_steps: int
    built: Built
    pipeline: data_lib.InputPipeline
    writer: MetricWriter
    evaluators: list[Evaluator]  # process 0's; none on the others
    context: EvalContext  # what the evaluators were made with


# (last step, steps, device metrics) of a device call whose metrics are not fetched yet
Pending = tuple[int, int, Any]


def train_and_evaluate(
    config: ml_collections.ConfigDict,
    workdir: str | Path,
    *,
    evaluators: Sequence[MakeEvaluator] = (),
    compile_ahead: Sequence[CompileAhead] = (),
    init_from: str | Path | None = None,
    restart_from_scratch: bool = False,
    after_step: Callable[[StepEnd], bool] | None = None,
) -> dict[str, float]:
    """Trains (or resumes) in `workdir`, evaluates, checkpoints; returns the final eval metrics.

    `evaluators`, `compile_ahead` (what the launcher decodes after training, compiled during
    it when `precompile` says so): see `training.evaluators` and `training.precompile`.
    `after_step`, for measurements only (time to BLEU, compile counts): called after every
    device call; True ends the run there."""
    workdir = check_workdir(workdir)
    configure_process(config)  # before anything computes (XLA flags, host memory)
    is_main = jax.process_index() == 0
    # Out of device memory anywhere inside: one line, once the last save is complete.
    memory = MemoryWatch(config, workdir)
    # The lock is process 0's, for all (one workdir).
    with workdir_lock.hold(workdir, enabled=is_main), memory.watching():
        # ------------------------------------------------------------ validate and set up
        devices, processes = jax.local_device_count(), jax.process_count()
        validate_config(config, num_devices=devices, process_count=processes)
        # Writes nothing; raises on refused keys, unless no checkpoint would be mixed up.
        changes = check_resume_config(
            config, workdir, restart_from_scratch=restart_from_scratch, defaults=run_defaults()
        )
        init_from = None if init_from is None else finetune.check_init_from(init_from, workdir)
        parallel = DataParallel.create(config.parallelism)

        # ------------------------------------------------------------ data
        tokenizers, tokenizers_saved = _saved_tokenizers(workdir, init_from, changes)
        pipeline = data_lib.create_input_pipeline(
            config.data,
            row_multiple=parallel.num_local_devices,  # so put_batch splits every batch evenly
            process_index=jax.process_index(),
            process_count=processes,
            tokenizers=tokenizers,  # None: build them
            eval_batch_rows=config.eval.loss_batch_size,
        )
        train_iter = pipeline.train_iter
        total_steps = resolve_num_train_steps(config, train_iter.batches_per_epoch)

        # ------------------------------------------------------------ model, optimizer, steps
        built = build(
            config,
            src_vocab_size=pipeline.src_tokenizer.vocab_size,
            tgt_vocab_size=pipeline.tgt_tokenizer.vocab_size,
            total_steps=total_steps,
            parallel=parallel,
        )

        # ------------------------------------------------------------ restore or initialise
        manager, state, meta = restore_or_init(
            config, workdir, built, pipeline, init_from, restart_from_scratch
        )
        trains = int(state.step) < total_steps
        if is_main and trains:  # only now: a refused or failed start leaves the workdir as it was
            _record_run(config, workdir, changes, pipeline, init_from, tokenizers_saved)
        elif not trains:  # config.json keeps the run's own length and settings
            _nothing_to_train_note(workdir, int(state.step), total_steps, changes)
        run = start_run(config, workdir, built, pipeline, evaluators, state, total_steps)
        start_step = step = int(state.step)
        device_state, host_params = parallel.put_replicated(state), state.params
        del state  # the device copy is donated to the step from here on

        # ------------------------------------------------------------ train loop
        saves = SaveWatch(manager)  # a failed save stops the run, in one line
        stop = preemption.StopSignals.install()  # SIGTERM/SIGINT: save after this step, stop
        # The eval and decoding programs, compiled in a thread once the train step is
        # compiled, while the run trains (`precompile`; nothing when it is "off").
        ahead, finished = precompile.Ahead(run, host_params, compile_ahead), False
        del host_params  # kept by `ahead` while it needs them
        try:
            progress, pending = Progress(total_steps, start_step), list[Pending]()
            summary, final = {}, None
            while step < total_steps:
                n = min(config.steps_per_call, _next_boundary(config, step, total_steps) - step)
                batches = [next(train_iter) for _ in range(n)]
                memory.at("train", step + n)
                with compile_log.kind("train step"):
                    device_state, metrics = _train_call(built, device_state, batches)
                ahead.start(device_state.params)  # the first time: the step is compiled now
                step += n
                pending.append((step, n, metrics))  # stays on device: no host sync in the hot loop
                saves.check(step)  # a save that failed (disk full) stops the run here
                fetch = functools.partial(parallel.get_replicated, device_state.params)
                ended = bool(after_step) and after_step(StepEnd(step, total_steps, batches, fetch))
                signalled = stop.requested(step, every=config.log_every_steps)
                last = step == total_steps or ended
                do_eval = not signalled and (last or _every(step, config.eval_every_steps))
                do_save = last or signalled or _every(step, config.checkpoint_every_steps)
                if do_eval or do_save or _every(step, config.log_every_steps):
                    summary, pending = log_and_check(run, pending, step, progress), []
                    memory.checked(step)
                if do_save:  # asynchronous write; NaN states never get here
                    save(run, saves, device_state, meta, step)
                if signalled:  # `saves.close()` below waits for the save before this is reported
                    raise preemption.Preempted(signalled, step)
                if do_eval:
                    ahead.wait_for_eval()  # its programs, if being compiled: never twice
                    final = evaluate(run, device_state.params, step, memory=memory)
                if ended:
                    break

            # ------------------------------------------------------------ final evaluation
            if final is None:  # nothing left to train: the checkpoint was already at the last step
                final, summary = _nothing_to_train(run, device_state.params, start_step, memory)
            signalled = stop.requested(step, every=1)  # during the final evaluation
            if signalled:  # the last step is saved: the same command evaluates again
                raise preemption.Preempted(signalled, step)
            finished = True
        finally:  # a save in flight is completed even when the loop raised (e.g. NaN)
            try:
                ahead.close(finish=finished)  # stopped early: only the compile in flight
                stop.restore()
                train_iter.close()  # subword-sampling workers, if any
                saves.close()
            finally:  # quiet after a failed write, which was reported
                run.writer.close()
        if "loss" in summary:
            final["train_loss"] = summary["loss"]
        log("Final validation: %s", json.dumps({k: round(v, 4) for k, v in final.items()}))
        return final


def start_run(
    config: ml_collections.ConfigDict,
    workdir: Path,
    built: Built,
    pipeline: data_lib.InputPipeline,
    evaluators: Sequence[MakeEvaluator],
    state: TrainState,
    total_steps: int,
) -> Run:
    """The metric writer and the evaluators (process 0's) of a run about to train; logs what
    it trains."""
    start_step, is_main = int(state.step), jax.process_index() == 0
    # TensorBoard hides events of steps after the restored one (written before a kill).
    purge_step = start_step + 1 if start_step else None
    writer = MetricWriter(workdir, enabled=is_main, purge_step=purge_step)
    context = EvalContext(
        config,
        built.eval_model_config,
        pipeline.src_tokenizer,
        pipeline.tgt_tokenizer,
        pipeline.eval_pairs,
        pipeline.test_pairs,
    )
    made = [make(context) for make in evaluators] if is_main else []
    log(
        "Training %s for %d steps (%d per epoch) from step %d on %d devices (%s), %s params",
        workdir,
        total_steps,
        pipeline.train_iter.batches_per_epoch,
        start_step,
        jax.device_count(),
        config.parallelism,
        f"{sum(x.size for x in jax.tree.leaves(state.params)):,}",
    )
    return Run(config, workdir, total_steps, built, pipeline, writer, made, context)


def log_and_check(
    run: Run, pending: list[Pending], step: int, progress: Progress
) -> dict[str, float]:
    """Fetches the metrics of the calls since the last log, stops on a NaN/Inf loss or
    gradient, and writes (metrics.jsonl, TensorBoard) and logs their summary."""
    host = [
        item
        for end, n, m in pending
        for item in _per_step(end, n, run.built.parallel.get_replicated(m))
    ]
    _check_finite(host)
    summary = summarize(sum_tree([m for _, m in host]))
    summary["learning_rate"] = float(host[-1][1]["learning_rate"])
    summary["grad_norm"] = float(np.mean([m["grad_norm"] for _, m in host]))
    epoch = run.pipeline.train_iter.epoch
    summary["epoch"] = epoch
    line = progress.line(step, summary, f" | epoch {epoch}")
    summary["steps_per_sec"] = progress.steps_per_sec
    summary["tokens_per_sec"] = progress.tokens_per_sec
    run.writer.write(step, "train", summary)
    log(line)
    return summary


def save(run: Run, saves: SaveWatch, device_state: Any, meta: dict[str, Any], step: int) -> None:
    """Saves the state (asynchronously) with the data position; a non-finite one never."""
    host_state = run.built.parallel.get_replicated(device_state)
    bad = nonfinite_leaves(host_state)  # params and optimizer moments
    if bad:
        raise NonFiniteLossError(
            f"Non-finite state after step {step} ({', '.join(bad[:5])}); not saving this state."
        )
    saves.save(host_state, run.pipeline.train_iter.get_state(), meta)


def evaluate(
    run: Run,
    device_params: Any,
    step: int,
    *,
    record: bool = True,
    memory: MemoryWatch | None = None,
) -> dict[str, float]:
    """The validation loss, then each evaluator (process 0); logged, and written to
    metrics.jsonl and TensorBoard if `record`. `memory`: told which of the two runs."""
    if memory:
        memory.at("eval", step)
    parallel, sums = run.built.parallel, []
    for i, batch in enumerate(run.pipeline.eval_batches("eval")):
        if run.config.eval.num_batches and i >= run.config.eval.num_batches:
            break
        batch = {k: v for k, v in batch.items() if k != "index"}
        with compile_log.kind("eval"):
            sums.append(run.built.eval_step(device_params, parallel.put_batch(batch)))
    summary = summarize(sum_tree(parallel.get_replicated(sums)))
    scores: dict[str, float] = {}
    if run.evaluators:
        if memory:  # the loss's errors are raised by now (its sums were fetched)
            memory.at("evaluators", step)
        params = parallel.get_replicated(device_params)
        for evaluator in run.evaluators:
            for name, value in evaluator(params, step).items():
                if isinstance(value, str):  # a text summary, e.g. sample translations
                    if record:
                        run.writer.write_text(step, f"eval/{name}", value)
                else:
                    scores[name] = value
    summary.update(scores)
    if record:
        run.writer.write(step, "eval", summary)
    log(
        "eval @ step %d | loss %.4f | ppl %.2f | accuracy %.3f%s",
        step,
        summary["nll"],
        summary["perplexity"],
        summary["accuracy"],
        "".join(f" | {name} {value:.2f}" for name, value in scores.items()),
    )
    return summary


def _nothing_to_train(
    run: Run, device_params: Any, start_step: int, memory: MemoryWatch
) -> tuple[dict[str, float], dict[str, float]]:
    """(final eval metrics, last train summary) of a run whose checkpoint is at its last step
    or past it: evaluated again, recorded nowhere (metrics.jsonl has it); the train loss from
    the log."""
    final = evaluate(run, device_params, start_step, record=False, memory=memory)
    previous = history.last_record(run.workdir, "train") if jax.process_index() == 0 else None
    if previous and previous.get("loss") is not None:
        return final, {"loss": previous["loss"]}
    return final, {}


def _nothing_to_train_note(
    workdir: Path, step: int, total_steps: int, changes: list[ConfigChange]
) -> None:
    """Logs why a run whose checkpoint is at or past `total_steps` trains nothing; its
    config.json is left as it is (the config's changes would record a run that never was)."""
    if step == total_steps:
        log("Nothing to train: the checkpoint of %s is at its last step, %d.", workdir, step)
    else:
        log(
            "Nothing to train: %s is already trained to step %d, past this config's %d steps "
            "(its config.json is left as it was). To evaluate it: %s; to train it further, "
            "give more than %d steps.",
            workdir,
            step,
            total_steps,
            command("evaluate", workdir=workdir),
            step,
        )
    if changes:
        log("Not recorded, as nothing is trained: %s.", "; ".join(str(c) for c in changes))


def _saved_tokenizers(
    workdir: Path, init_from: Path | None, changes: list[ConfigChange]
) -> tuple[tuple[Any, Any] | None, bool]:
    """(the run's (source, target) tokenizers, or None: build them; whether they are the
    workdir's own, already saved).

    The workdir's `tokenizer/`, else that of the run it fine-tunes. Until the workdir has a
    checkpoint nothing depends on its `tokenizer/`: one that cannot be loaded (a kill while
    it was written) or was built for a config now replaced (`resume`'s "replaced" changes,
    accepted only when no checkpoint is at stake) is built again, and saved over, with a log
    line. Once it has one, only the run's own files fit its checkpoints (`RunFileError`).
    """
    own = workdir / ckpt.TOKENIZER_DIR
    if own.exists():
        if any(c.kind == "replaced" for c in changes):  # there is no checkpoint then
            log("Building the tokenizers again: %s was built for the replaced config.", own)
        else:
            try:
                return ckpt.load_workdir_tokenizers(own), True
            except ckpt.RunFileError as error:
                if history.ever_checkpointed(workdir):
                    raise
                reason = error.__cause__ or error
                logging.warning(
                    "%s cannot be loaded (%s: %s), and no checkpoint uses it yet: building "
                    "the tokenizers again.",
                    own,
                    type(reason).__name__,
                    ckpt.one_line(reason),
                )
    if init_from is not None:
        return ckpt.load_workdir_tokenizers(init_from / ckpt.TOKENIZER_DIR), False
    return None, False


def _record_run(
    config: ml_collections.ConfigDict,
    workdir: Path,
    changes: list[ConfigChange],
    pipeline: data_lib.InputPipeline,
    init_from: Path | None,
    tokenizers_saved: bool,
) -> None:
    """Records the config of the run (with the accepted changes of a resume, logged), and
    its tokenizers and truecaser (or the fine-tuned run's) unless they are saved already:
    atomically, so a kill leaves all of `tokenizer/` or none (`data.save_tokenizers`)."""
    log_changes(changes, workdir)
    ckpt.save_config(config, workdir)
    if not tokenizers_saved:
        truecaser = pipeline.truecaser
        if truecaser is None and init_from is not None:  # given tokenizers come without one
            truecaser = ckpt.load_truecaser(init_from)
        data_lib.save_tokenizers(
            pipeline.src_tokenizer,
            pipeline.tgt_tokenizer,
            workdir / ckpt.TOKENIZER_DIR,
            truecaser=truecaser,
        )


def _next_boundary(config: ml_collections.ConfigDict, step: int, total_steps: int) -> int:
    """The first step after `step` that logs, evaluates, checkpoints or ends the run."""
    ends = [total_steps]
    for every in (config.log_every_steps, config.eval_every_steps, config.checkpoint_every_steps):
        if every:
            ends.append((step // every + 1) * every)
    return min(ends)


def _every(step: int, every: int) -> bool:
    return bool(every) and step % every == 0


def _train_call(built: Built, device_state: Any, host_batches: list[dict]) -> tuple[Any, Any]:
    """One device call: one optimizer step, or several in one `lax.scan` (steps_per_call)."""
    if len(host_batches) == 1:
        return built.train_step(device_state, built.parallel.put_batch(host_batches[0]))
    return built.train_steps(device_state, built.parallel.put_batches(host_batches))


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
