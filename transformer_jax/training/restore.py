"""Where a run starts: its newest usable checkpoint, another run's parameters, or step 0.

    manager, state, meta = restore_or_init(config, workdir, built, pipeline, init_from, False)

The newest checkpoint that restores and passes its checks (`workdir.state_checks`: shapes,
finite values, the data position) is resumed, with the train iterator set to its position;
a workdir whose checkpoints are all unusable is refused (`history.NoUsableCheckpointError`)
unless `restart_from_scratch`, which moves the old history to previous_runs/ first; one
that never committed a checkpoint starts afresh the same way. Without a checkpoint,
`init_from` (another workdir) gives the parameters and a fresh optimizer (`finetune`), else
the state is initialised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp

from transformer_jax import data as data_lib
from transformer_jax.runtime import compile_log
from transformer_jax.training import finetune
from transformer_jax.training.builder import Built
from transformer_jax.training.metrics import log
from transformer_jax.training.state import TrainState
from transformer_jax.workdir import checkpoints as ckpt
from transformer_jax.workdir import history
from transformer_jax.workdir.state_checks import check_restored


def restore_or_init(
    config: ml_collections.ConfigDict,
    workdir: Path,
    built: Built,
    pipeline: data_lib.InputPipeline,
    init_from: Path | None,
    restart_from_scratch: bool,
) -> tuple[ocp.CheckpointManager, TrainState, dict[str, Any]]:
    """(checkpoint manager, host state, meta to save with each checkpoint) of the run.

    The newest usable checkpoint of `workdir`, its data position set in the train iterator;
    else, once an old history is refused or moved aside (`_start_afresh`), `init_from`'s
    parameters (a fine-tune) or a fresh state. Creates the workdir, writes nothing else.
    """
    is_main = jax.process_index() == 0
    train_iter, tokenizers = pipeline.train_iter, (pipeline.src_tokenizer, pipeline.tgt_tokenizer)
    abstract_state = built.abstract_state()
    meta = ckpt.vocabulary_meta(*tokenizers)
    if is_main:
        workdir.mkdir(parents=True, exist_ok=True)
    manager = ckpt.make_manager(workdir, keep=config.keep_checkpoints)

    def check_data_position(state: Any, data_state: dict, saved: dict, step: int) -> None:
        check_restored(
            state,
            abstract_state,
            saved,
            step=step,
            data_state=data_state,
            epoch_length=train_iter.epoch_length,
        )

    try:
        restored = ckpt.restore_latest(manager, abstract_state, check=check_data_position)
        if restored is not None:
            state, data_state, saved = restored
            ckpt.check_vocabulary_meta(saved, *tokenizers)
            train_iter.set_state(data_state)
            saved_shards, shards = data_state.get("shards"), train_iter.get_state()["shards"]
            if saved_shards is not None and saved_shards != shards:
                log(
                    "Resuming on %d devices where the run trained on %d: the same batches, "
                    "but sums over devices in another order, so not bit-identical to a run "
                    "that stays on %d.",
                    shards,
                    saved_shards,
                    saved_shards,
                )
            meta.update({k: saved[k] for k in finetune.PROVENANCE_KEYS if k in saved})
            dropped = history.truncate_metrics(workdir, int(state.step)) if is_main else 0
            log(
                "Resumed from step %d (%s)%s",
                int(state.step),
                manager.directory,
                f"; dropped {dropped} metrics.jsonl records of later steps" if dropped else "",
            )
            if restart_from_scratch:
                log("--restart_from_scratch ignored: %s has a usable checkpoint.", workdir)
            return manager, state, meta
        _start_afresh(workdir, restart_from_scratch, is_main)
        if init_from is not None:
            state, source_step = finetune.init_from_state(
                init_from, abstract_state, built.tx, config.seed
            )
            meta.update(finetune.provenance(init_from, source_step))
            log(
                "Fine-tuning the parameters of %s (step %d), fresh optimizer",
                init_from,
                source_step,
            )
            return manager, state, meta
        with compile_log.kind("init"):
            return manager, built.init_state(), meta
    except BaseException:  # a refused start leaves no manager threads behind
        manager.close()
        raise


def _start_afresh(workdir: Path, restart_from_scratch: bool, is_main: bool) -> None:
    """Before step 0 in a workdir without a usable checkpoint: refuses to train over a
    previous run's history (`NoUsableCheckpointError`) unless `restart_from_scratch` or the
    run never committed a checkpoint; then moves that history to previous_runs/."""
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
